"""Z-Image: the shared options it reads (torch-free; see trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.models.option_sets import DENSITY, DISTILLED, SAMPLING, SINGLE_FILE

READS = DENSITY | SAMPLING | SINGLE_FILE | DISTILLED | {"text_encoder", "ae"}
NOTES = {"ae": "FLUX.1's ae.safetensors.", "text_encoder": "ComfyUI's text_encoders/qwen_3_4b.safetensors.",
         "tokenizer_cache_dir": "its Qwen3 tokenizer."}
