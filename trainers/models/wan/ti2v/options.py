"""Wan 2.2 TI2V 5B: the shared options it reads (torch-free; see trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.models.option_sets import DENSITY, SAMPLING

READS = DENSITY | SAMPLING
