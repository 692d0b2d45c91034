"""Qwen-Image-Edit and Edit-2509/2511: Qwen-Image's options and an edit model's (torch-free; see
trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.models.option_sets import EDIT, EDIT_NOTES, SINGLE_FILE
from trainers.models.qwen_image.options import READS as QWEN_READS
from trainers.models.qwen_image.options import TIMESTEP_SAMPLINGS

__all__ = ["NOTES", "READS", "TIMESTEP_SAMPLINGS"]
READS = (QWEN_READS - SINGLE_FILE - {"text_encoder", "ae"}) | EDIT
NOTES = dict(EDIT_NOTES)
