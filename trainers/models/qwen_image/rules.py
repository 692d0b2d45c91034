"""Qwen-Image without its weights (torch-free): its pipeline, and the flow options it reads (musubi-tuner's names and
meanings for Qwen-Image: timestep_sampling, discrete_flow_shift, weighting_scheme; no guidance embedding)."""
from __future__ import annotations

from pathlib import Path

from trainers.core.memory_facts import (QWEN25_VL_7B, QWEN25_VL_7B_LINEAR, QWEN_IMAGE_TOKENS, QWEN_IMAGE_VAE,
                                         ModelSize)
from trainers.models.flow_rules import FlowRules, Part


class QwenImageRules(FlowRules):
    name = "qwen_image"
    title = "Qwen-Image"
    # activations: FLUX.1's scaled by width x block-streams (benchmarks/count_model_sizes.py), to calibrate
    memory_facts = ModelSize(20_430_401_088, 20_424_818_688, QWEN25_VL_7B, QWEN25_VL_7B_LINEAR, QWEN_IMAGE_VAE,
                             6_635_520, 0, 60, "the published Qwen-Image sizes", 1024 * 1024, 37.9, 3.5,
                             tokens=QWEN_IMAGE_TOKENS)
    base_model_version = "qwen_image"  # musubi-tuner's ss_base_model_version (ARCHITECTURE_QWEN_IMAGE_FULL)
    modelspec_architecture = "Qwen-Image"
    arch_dir = Path(__file__).with_name("arch")  # none: diffusers folders carry their configs
    pipeline_class = "QwenImagePipeline"
    frozen_text_encoder = "Qwen2.5-VL"
    # ComfyUI's and musubi-tuner's single files (diffusers' module names; only Qwen-Image has txt_norm), its text
    # encoder and autoencoder in files of their own (ComfyUI's split layout; musubi-tuner's --text_encoder, --vae)
    reference_prefixes = ("txt_norm.", "model.diffusion_model.txt_norm.", "diffusion_model.txt_norm.")
    checkpoint_parts = (Part("llm", "text_encoders.qwen25_7b.", "text_encoder", "Qwen2.5-VL text encoder",
                             base_config=Path(__file__).with_name("text_encoder.json"), tokenizer="Qwen/Qwen-Image",
                             tokenizer_subfolder="tokenizer", reader="trainers.models.qwen_image.parts"),
                        Part("vae", "vae.", "ae", "autoencoder (Qwen-Image's qwen_image_vae.safetensors)",
                             reader="trainers.models.qwen_image.parts", denoiser_input=("img_in.weight", 4),
                             file_keys=(("encoder.conv1.weight", "encoder.conv_in.weight"),  # Wan's or diffusers'
                                        ("conv2.weight", "post_quant_conv.weight"))))


QWEN_IMAGE = QwenImageRules()
