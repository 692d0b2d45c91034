"""Ideogram 4: the shared options it reads and its own timestep sampling (torch-free; see
trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.models.option_sets import DENSITY, SAMPLING, SINGLE_FILE

READS = DENSITY | SAMPLING | SINGLE_FILE | {"text_encoder", "ae"}
TIMESTEP_SAMPLINGS = {"ideogram4_shift": "a logit-normal (std 1.5) centred by the image's size, as Ideogram 4 samples "
                                         "(musubi-tuner's default for it)."}
NOTES = {"timestep_sampling": "Ideogram 4 trains with 'ideogram4_shift' in musubi-tuner (its presets too).",
         "text_encoder": "Comfy-Org's Qwen3-VL 8B text_encoders file (its language model; fp8 scaled read too).",
         "ae": "FLUX.2's autoencoder, ComfyUI's vae/flux2-vae.safetensors.",
         "tokenizer_cache_dir": "its Qwen3-VL tokenizer (Qwen/Qwen3-VL-8B-Instruct's)."}
