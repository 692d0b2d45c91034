"""The fake family without its weights (torch-free): it claims the folders build_fake_model writes."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainers.models.rules import CheckpointKeys, FamilyRules

PIPELINE = "FakeDenoiserPipeline"
# The single file's tensor names per part (family.to_checkpoint): the denoiser's under the name every UNet's sits at,
# so its LoRA modules' reference paths (trainers/loras/layers.py) are its own module paths.
CHECKPOINT_PREFIXES = {"denoiser": "model.diffusion_model.", "vae": "fake_vae.", "text_encoder": "fake_text_encoder."}


class FakeRules(FamilyRules):
    name = "fake"
    title = "Fake"
    unet_key_style = "own"  # lora_targets names its modules
    denoiser_folder = "denoiser"
    arch_dir = Path(__file__).with_name("arch")
    pipeline_class = PIPELINE
    single_file_text_encoders = ()
    own_checkpoint_layout = True  # a single file of it is to_checkpoint's layout

    def claims_folder(self, index: dict[str, Any], unet_config: dict[str, Any], folder: Path) -> bool:
        return index.get("_class_name") == PIPELINE

    def claims_checkpoint(self, keys: CheckpointKeys) -> bool:
        return keys.has(CHECKPOINT_PREFIXES["vae"])


FAKE = FakeRules()
