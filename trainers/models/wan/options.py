"""Wan 2.1: the shared options it reads (torch-free; see trainers/core/options/families.py). musubi-tuner trains
Wan with timestep_sampling 'shift' and discrete_flow_shift 3.0 (its docs/wan.md); the presets set them. ComfyUI's
split files name their UMT5 file in text_encoder and their VAE file in ae (single_file.py)."""
from __future__ import annotations

from trainers.models.option_sets import DENSITY, SAMPLING, SINGLE_FILE

SPLIT_FILES = SINGLE_FILE | {"text_encoder", "ae"}  # ComfyUI's split files beside a diffusion_models file
READS = DENSITY | SAMPLING | SPLIT_FILES
NOTES = {
    "text_encoder": "ComfyUI's text_encoders/umt5_xxl_fp16.safetensors, or Wan-AI's models_t5_umt5-xxl-enc-bf16.pth "
                    "(musubi-tuner's --t5); the fp8_scaled files are refused.",
    "ae": "ComfyUI's vae/wan_2.1_vae.safetensors, or Wan-AI's Wan2.1_VAE.pth (musubi-tuner's --vae).",
    "tokenizer_cache_dir": "its UMT5 tokenizer (google/umt5-xxl).",
}
