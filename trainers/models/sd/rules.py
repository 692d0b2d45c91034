"""SD1.x and SD2.x without their weights (torch-free): told apart by the text embeddings' width and the pipeline."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainers.core.memory_facts import CLIP_L, CLIP_L_LINEAR, CLIP_L_LORA, SD_VAE, ModelSize
from trainers.models.rules import UNET_PREFIX, CheckpointKeys, FamilyRules, TextEncoderPart

ARCH = Path(__file__).with_name("arch")
SD1_TE_PREFIX = "cond_stage_model.transformer."  # HF CLIP ViT-L, `text_model.` below it
SD2_TE_PREFIX = "cond_stage_model.model."  # OpenCLIP ViT-H


class StableDiffusionRules(FamilyRules):
    unet_key_style = "diffusers"
    pipeline_class = "StableDiffusionPipeline"

    def __init__(self, name: str, title: str, base_model_version: str, architecture: str, arch_dir: Path,
                 implementation: str, text_encoder: TextEncoderPart, cross_attention_width: int,
                 detect_priority: int, memory_facts: ModelSize) -> None:
        self.name, self.title, self.base_model_version = name, title, base_model_version
        self.modelspec_architecture, self.arch_dir, self.implementation = architecture, arch_dir, implementation
        self.single_file_text_encoders = (text_encoder,)
        self.width, self.detect_priority, self.memory_facts = cross_attention_width, detect_priority, memory_facts

    def claims_folder(self, index: dict[str, Any], unet_config: dict[str, Any], folder: Path) -> bool:
        """SD2 by its 1024-wide text embeddings; SD1 by the pipeline class (tiny models too) or 768."""
        width = unet_config.get("cross_attention_dim")
        pipeline = str(index.get("_class_name", ""))
        return width == self.width or self.name == "sd1" and pipeline.startswith("StableDiffusion")

    def claims_checkpoint(self, keys: CheckpointKeys) -> bool:
        if keys.has(self.single_file_text_encoders[0].prefix):
            return True
        return not keys.has("cond_stage_model.") and keys.cross_attention_width(UNET_PREFIX) == self.width


SD1 = StableDiffusionRules("sd1", "SD1.x", "sd_v1", "stable-diffusion-v1", ARCH / "sd15",
                           "https://github.com/CompVis/stable-diffusion",
                           TextEncoderPart("CLIPTextModel", "text_encoder", SD1_TE_PREFIX), 768, detect_priority=0,
                           memory_facts=ModelSize(859_520_964, 270_049_280, CLIP_L, CLIP_L_LINEAR, SD_VAE, 374_016,
                                                  CLIP_L_LORA, 9, "the published SD1.5 sizes", 512 * 512, 2.6, 0.6))
SD2 = StableDiffusionRules("sd2", "SD2.x", "sd_v2", "stable-diffusion-v2-768-v", ARCH / "sd2_768v",
                           "https://github.com/Stability-AI/stablediffusion",
                           TextEncoderPart("CLIPTextModel", "text_encoder", SD2_TE_PREFIX), 1024, detect_priority=1,
                           memory_facts=ModelSize(865_910_724, 272_000_000, 340_387_840, 289_406_976, SD_VAE, 374_016,
                                                  423_936, 9, "the published SD2.1 sizes", 768 * 768, 5.0, 1.0))
