"""Krea 2: the shared options it reads and its own timestep sampling (torch-free; see
trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.models.option_sets import DENSITY, DISTILLED, SAMPLING

READS = DENSITY | SAMPLING | DISTILLED
TIMESTEP_SAMPLINGS = {"krea2_shift": "'sigmoid' then shifted by the image's size as Krea 2 base samples "
                                     "(musubi-tuner's)."}
