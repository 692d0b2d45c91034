"""Qwen-Image: the shared options it reads and its own timestep sampling (torch-free; see
trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.models.option_sets import DENSITY, SAMPLING, SINGLE_FILE

READS = DENSITY | SAMPLING | SINGLE_FILE | {"text_encoder", "ae"}
TIMESTEP_SAMPLINGS = {"qwen_shift": "'sigmoid' then shifted by the image's size as its pipeline samples "
                                    "(musubi-tuner's)."}
NOTES = {"ae": "vae/qwen_image_vae.safetensors.", "text_encoder": "ComfyUI's text_encoders/qwen_2.5_vl_7b.safetensors.",
         "tokenizer_cache_dir": "its Qwen2.5-VL tokenizer."}
