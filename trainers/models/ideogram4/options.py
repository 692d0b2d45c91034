"""Ideogram 4: the shared options it reads and its own timestep sampling (torch-free; see
trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.models.option_sets import DENSITY, SAMPLING

READS = DENSITY | SAMPLING
TIMESTEP_SAMPLINGS = {"ideogram4_shift": "a logit-normal (std 1.5) centred by the image's size, as Ideogram 4 samples "
                                         "(musubi-tuner's default for it)."}
NOTES = {"timestep_sampling": "Ideogram 4 trains with 'ideogram4_shift' in musubi-tuner (its presets too)."}
