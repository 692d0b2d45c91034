"""Wan 2.2 TI2V 5B without its weights (torch-free): a WanPipeline folder with one transformer and expand_timesteps
(its per-token timesteps), over Wan 2.2's 48-channel autoencoder (16x in space: 2x2 patches into the VAE, then 8x),
at 24 fps. Its buckets step by 32 pixels (the 16x VAE, then the transformer's 2x2 patches)."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.memory_facts import UMT5_XXL, UMT5_XXL_LINEAR, WAN22_VAE, WAN_TI2V_TOKENS, ModelSize
from trainers.models.rules import ModelFiles
from trainers.models.wan.rules import WanRules
from trainers.models.wan.split_files import SingleFiles

# WanTransformer3DModel 3072 wide, 30 layers, 48 channels (counted on the meta device, diffusers 0.42.1)
TI2V_5B, TI2V_5B_LINEAR, TI2V_5B_LORA_PER_RANK = 4_999_787_712, 4_996_792_320, 2_519_040


class WanTI2VRules(WanRules):
    name = "wan22_ti2v"
    title = "Wan 2.2 TI2V 5B"
    detect_priority = 4  # before Wan 2.1's: the same pipeline class
    # activations from its sequence (WAN_TI2V_TOKENS: 31 latent frames x 880 tokens for 121 frames at 1280x704), the
    # figures for that clip (Wan 2.1 1.3B's scaled by tokens and width) kept beside it
    memory_facts = ModelSize(TI2V_5B, TI2V_5B_LINEAR, UMT5_XXL, UMT5_XXL_LINEAR, WAN22_VAE, TI2V_5B_LORA_PER_RANK, 0,
                             30, "the published Wan 2.2 TI2V 5B sizes", 1280 * 704, 55.9, 5.2,
                             tokens=WAN_TI2V_TOKENS)
    memory_variants = {}
    base_model_version = "wan22_ti2v_5b"
    modelspec_architecture = "wan2.2-ti2v-5b"
    frame_rate = 24.0  # Wan 2.2 TI2V 5B's (121 frames at 24 fps)
    bucket_step = 32
    single_file_kind = "ti2v"  # the kind (wan_file_kind) detection gives its 48-channel files

    @property
    def single_files(self) -> SingleFiles:
        from trainers.models.wan.ti2v.vae_files import TI2V_FILES

        return TI2V_FILES

    def own_file_issues(self, name: str, shapes: Mapping[str, tuple[int, ...]],
                        files: ModelFiles) -> list[ConfigIssue]:
        from trainers.models.wan.ti2v.vae_files import vae22_issues

        return super().own_file_issues(name, shapes, files) + vae22_issues(files.ae)

    def claims_folder(self, index: dict[str, Any], unet_config: dict[str, Any], folder: Path) -> bool:
        """WanPipeline folders with one WanTransformer3DModel and expand_timesteps (Wan 2.2 TI2V 5B)."""
        if str(index.get("_class_name", "")) != self.pipeline_class or not index.get("expand_timesteps"):
            return False
        experts = [(index.get(name) or [None, None])[-1] for name in ("transformer", "transformer_2")]
        return experts == [self.transformer_class, None]


WAN22_TI2V = WanTI2VRules()
