"""ERNIE-Image: the shared options it reads (torch-free; see trainers/core/options/families.py). No sd-scripts or
musubi-tuner script trains it; its peers are ai-toolkit, SimpleTuner and OneTrainer."""
from __future__ import annotations

from trainers.models.option_sets import DENSITY, DISTILLED, SAMPLING, SINGLE_FILE

READS = DENSITY | SAMPLING | DISTILLED | SINGLE_FILE | {"text_encoder", "ae"}
NOTES = {
    "text_encoder": "ComfyUI's text_encoders file of Ministral 3 3B (its language model; fp8 scaled read too).",
    "ae": "FLUX.2's autoencoder, ComfyUI's vae/flux2-vae.safetensors.",
    "tokenizer_cache_dir": "its tokenizer (baidu/ERNIE-Image's).",
    "discrete_flow_shift": "ERNIE-Image samples with shift 4.0 (its published scheduler); the presets train with "
                           "3.0, ai-toolkit's training scheduler.",
}
