"""SDXL without its weights (torch-free): told apart by its pipeline, its added conditions or its second encoder."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainers.core.memory_facts import (CLIP_G, CLIP_G_LINEAR, CLIP_G_LORA, CLIP_L, CLIP_L_LINEAR, CLIP_L_LORA, SD_VAE,
                                        ModelSize)
from trainers.models.rules import UNET_PREFIX, CheckpointKeys, FamilyRules, ModelLoadError, TextEncoderPart

TE1_PREFIX = "conditioner.embedders.0.transformer."  # HF CLIP ViT-L, `text_model.` below it
TE2_PREFIX = "conditioner.embedders.1.model."  # OpenCLIP bigG
REFINER_TE_PREFIX = "conditioner.embedders.0.model."  # the refiner has only OpenCLIP bigG


class StableDiffusionXLRules(FamilyRules):
    name = "sdxl"
    title = "SDXL"
    memory_facts = ModelSize(2_567_463_684, 2_232_647_680, CLIP_L + CLIP_G, CLIP_L_LINEAR + CLIP_G_LINEAR, SD_VAE,
                             2_659_840, CLIP_L_LORA + CLIP_G_LORA, 7, "the published SDXL 1.0 sizes", 1024 * 1024, 9.0,
                             1.6)
    unet_key_style = "sgm"
    supports_clip_skip = False  # SDXL already uses the penultimate layer of both encoders
    detect_priority = 2
    arch_dir = Path(__file__).with_name("arch") / "sdxl"
    pipeline_class = "StableDiffusionXLPipeline"
    single_file_text_encoders = (TextEncoderPart("CLIPTextModel", "text_encoder", TE1_PREFIX),
                                 TextEncoderPart("CLIPTextModelWithProjection", "text_encoder_2", TE2_PREFIX))

    def claims_folder(self, index: dict[str, Any], unet_config: dict[str, Any], folder: Path) -> bool:
        return ("XL" in str(index.get("_class_name", "")) or unet_config.get("addition_embed_type") == "text_time"
                or (folder / "text_encoder_2").is_dir())

    def claims_checkpoint(self, keys: CheckpointKeys) -> bool:
        if keys.has(TE2_PREFIX):
            return True
        if keys.has(REFINER_TE_PREFIX):
            raise ModelLoadError(f"{keys.name} looks like an SDXL refiner checkpoint, which is not supported; "
                                 "use an SDXL base model")
        return keys.has(UNET_PREFIX + "label_emb.") or keys.cross_attention_width(UNET_PREFIX) == 2048


SDXL = StableDiffusionXLRules()
