"""Ideogram 4 without its weights (torch-free): its pipeline (Ideogram4Pipeline: a conditional and an unconditional
Ideogram4Transformer2DModel, a Qwen3-VL 8B text encoder, FLUX.2's autoencoder), its published sizes, and the flow
options it reads (musubi-tuner's names and meanings: timestep_sampling 'ideogram4_shift')."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.memory_facts import FLUX2_AE, IDEOGRAM4_TOKENS, QWEN3_VL_8B_MODEL, QWEN3_VL_8B_MODEL_LINEAR, \
    ModelSize
from trainers.models.ernie_image.rules import FLUX2_AE_PART, single_file_issues
from trainers.models.flow_rules import FlowRules, Part
from trainers.models.rules import CheckpointKeys, ModelFiles

TRANSFORMER_CLASS = "Ideogram4Transformer2DModel"
# Comfy-Org's split files beside its diffusion_models file: Qwen3-VL's language model (text_encoder.py), FLUX.2's
# autoencoder (ERNIE-Image's reader); the tokenizer Qwen/Qwen3-VL-8B-Instruct's (musubi-tuner's) from the hub or
# tokenizer_cache_dir
SPLIT_PARTS = (Part("llm", "text_encoders.qwen3vl_8b.", "text_encoder", "Qwen3-VL text encoder (Comfy-Org's "
                    "text_encoders Qwen3-VL 8B file)", tokenizer="Qwen/Qwen3-VL-8B-Instruct",
                    reader="trainers.models.ideogram4.text_encoder"),
               replace(FLUX2_AE_PART, denoiser_input=("input_proj.weight", 4)))


class Ideogram4Rules(FlowRules):
    name = "ideogram4"
    title = "Ideogram 4"
    # counted on the meta device from diffusers 0.42.1's class defaults (the published layout: 34 blocks 4608 wide,
    # 53,248 text features); LoRA per rank: musubi-tuner's targets (attention.qkv fused, attention.o,
    # feed_forward.w1/w2/w3 of every block); the text encoder a Qwen3VLModel (no LM head); its unconditional
    # transformer is neither loaded nor trained (saved folders copy it)
    memory_facts = ModelSize(9_279_288_448, 9_277_931_520, QWEN3_VL_8B_MODEL, QWEN3_VL_8B_MODEL_LINEAR, FLUX2_AE,
                             2_663_424, 0, 34, "the published Ideogram 4 sizes", 1024 * 1024, tokens=IDEOGRAM4_TOKENS)
    arch_dir = Path(__file__).with_name("arch")
    pipeline_class = "Ideogram4Pipeline"
    base_model_version = "ideogram4"  # musubi-tuner's ss_base_model_version (ARCHITECTURE_IDEOGRAM4_FULL)
    modelspec_architecture = "Ideogram-4"  # musubi-tuner's ARCH_IDEOGRAM4
    # Comfy-Org's single files (diffusion_models/ideogram4_fp8_scaled.safetensors; reference.py), told by its
    # image-indicator embedding, which no other family's file has (Lumina 2's and Z-Image's have
    # layers.N.attention.qkv too); finetunes are written so too (the conditional transformer alone, unquantized)
    reference_prefixes = ("embed_image_indicator.", "model.diffusion_model.embed_image_indicator.",
                          "diffusion_model.embed_image_indicator.")
    checkpoint_parts = SPLIT_PARTS
    frozen_text_encoder = "Qwen3-VL"

    def checkpoint_issues(self, keys: CheckpointKeys, files: ModelFiles, vae_path: str = "") -> list[ConfigIssue]:
        return single_file_issues(self, keys, files, vae_path)

    def claims_folder(self, index: dict[str, Any], unet_config: dict[str, Any], folder: Path) -> bool:
        """Its pipeline's folders, or any whose model_index.json names its transformer class."""
        return self.claims_by_pipeline_or_transformer(index, TRANSFORMER_CLASS)


IDEOGRAM4 = Ideogram4Rules()
