"""LTX-2: the shared options it reads (torch-free; see trainers/core/options/families.py). Its pipeline samples with a
resolution-dependent shift (mu from 0.95 at 1024 tokens to 2.05 at 4096, as ai-toolkit and SimpleTuner train it);
the presets train at the fixed shift that gives for their clips (timestep_sampling 'shift', discrete_flow_shift)."""
from __future__ import annotations

from trainers.models.option_sets import DENSITY, SAMPLING

READS = DENSITY | SAMPLING
