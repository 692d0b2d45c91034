"""Wan 2.1: the shared options it reads (torch-free; see trainers/core/options/families.py). musubi-tuner trains
Wan with timestep_sampling 'shift' and discrete_flow_shift 3.0 (its docs/wan.md); the presets set them."""
from __future__ import annotations

from trainers.models.option_sets import DENSITY, SAMPLING

READS = DENSITY | SAMPLING
