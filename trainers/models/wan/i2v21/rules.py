"""Wan 2.1 image-to-video without its weights (torch-free): a WanImageToVideoPipeline folder with one transformer
(36 input channels: the noisy latents, the first frame's mask and latent) and a CLIP image encoder (its features of
the first frame enter the transformer's cross-attention beside the text's), musubi-tuner's task i2v-14B."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.memory_facts import (
    CLIP_H_VISION,
    UMT5_XXL,
    UMT5_XXL_LINEAR,
    WAN21_VAE,
    WAN_14B_LORA_PER_RANK,
    WAN_14B_TOKENS,
    ModelSize,
)
from trainers.models.rules import ModelFiles
from trainers.models.wan.rules import WAN_14B_ACTIVATIONS, WanRules
from trainers.models.wan.split_files import SingleFiles

I2V_14B, I2V_14B_LINEAR = 16_394_878_784, 16_388_587_520  # its transformer (image projection, 36 channels)
PIPELINE = "WanImageToVideoPipeline"


class WanI2VRules(WanRules):
    name = "wan21_i2v"
    title = "Wan 2.1 I2V"
    detect_priority = 4  # before Wan 2.1 T2V's, which refuses this pipeline by name
    memory_facts = ModelSize(I2V_14B, I2V_14B_LINEAR, UMT5_XXL + CLIP_H_VISION, UMT5_XXL_LINEAR, WAN21_VAE,
                             WAN_14B_LORA_PER_RANK, 0, 40, "the published Wan 2.1 I2V 14B sizes", *WAN_14B_ACTIVATIONS,
                             tokens=WAN_14B_TOKENS)
    memory_variants = {}
    base_model_version = "wan21_i2v"
    modelspec_architecture = "wan2.1-i2v-14b"
    pipeline_class = PIPELINE
    single_file_kind = "i2v"  # the kind detection gives its files (36 channels and an image projection)

    @property
    def single_files(self) -> SingleFiles:
        from trainers.models.wan.i2v21.clip_files import I2V21_FILES

        return I2V21_FILES

    def own_file_issues(self, name: str, shapes: Mapping[str, tuple[int, ...]],
                        files: ModelFiles) -> list[ConfigIssue]:
        from trainers.models.wan.i2v21.clip_files import clip_issues

        return clip_issues(name, files.clip) + super().own_file_issues(name, shapes, files)

    def with_own_files(self, model: Any, shapes: Mapping[str, tuple[int, ...]], files: ModelFiles,
                       weight_dtype: Any) -> Any:
        from trainers.models.wan.i2v21.clip_encoder import with_image_encoder

        return with_image_encoder(model, files.clip, weight_dtype)

    def claims_folder(self, index: dict[str, Any], unet_config: dict[str, Any], folder: Path) -> bool:
        """WanImageToVideoPipeline folders with one WanTransformer3DModel and a CLIP image encoder."""
        if str(index.get("_class_name", "")) != PIPELINE or index.get("boundary_ratio") is not None:
            return False
        parts = [(index.get(name) or [None, None])[-1] for name in ("transformer", "transformer_2", "image_encoder")]
        return parts[0] == self.transformer_class and parts[1] is None and parts[2] is not None


WAN21_I2V = WanI2VRules()
