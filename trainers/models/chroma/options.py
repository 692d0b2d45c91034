"""Chroma: the shared options it reads, FLUX.1's without CLIP-L (torch-free; see trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.models.flux.options import NOTES as FLUX_NOTES
from trainers.models.flux.options import READS as FLUX_READS
from trainers.models.option_sets import DISTILLED

READS = FLUX_READS - DISTILLED - {"clip_l"}
NOTES = {**FLUX_NOTES, "text_encoder_max_tokens": "unset reads 512.",
         "apply_t5_attn_mask": "always masked (as sd-scripts requires).",
         "guidance_scale": "it has no guidance embedding: 0 (or the default, which it ignores)."}
