"""FLUX.2: the shared options it reads (an edit model's when control images are set) and its own timestep sampling
(torch-free; see trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.models.option_sets import DENSITY, DISTILLED, EDIT, EDIT_NOTES, SAMPLING

READS = DENSITY | SAMPLING | EDIT | DISTILLED | {"guidance_scale"}
TIMESTEP_SAMPLINGS = {"flux2_shift": "'sigmoid' then shifted by FLUX.1's rule for the tokens FLUX.2 reads "
                                     "(musubi-tuner's advice for FLUX.2)."}
NOTES = {**EDIT_NOTES, "control_directory": "it trains an edit LoRA when it is set."}
