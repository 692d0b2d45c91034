"""HunyuanVideo 1.5: the shared options it reads (torch-free; see trainers/core/options/families.py). musubi-tuner
trains it with timestep_sampling 'shift' and discrete_flow_shift 2.0 (its docs/hunyuan_video_1_5.md); the presets
set them."""
from __future__ import annotations

from trainers.models.option_sets import DENSITY, SAMPLING

READS = DENSITY | SAMPLING
