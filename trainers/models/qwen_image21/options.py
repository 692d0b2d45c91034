"""Qwen-Image 2.1: Qwen-Image's flow options and timestep sampling; no single files (torch-free; see
trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.models.option_sets import SINGLE_FILE
from trainers.models.qwen_image.options import READS as QWEN_READS
from trainers.models.qwen_image.options import TIMESTEP_SAMPLINGS

__all__ = ["READS", "TIMESTEP_SAMPLINGS"]
READS = QWEN_READS - SINGLE_FILE - {"text_encoder", "ae"}
