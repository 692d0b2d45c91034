"""ERNIE-Image: the shared options it reads (torch-free; see trainers/core/options/families.py). No sd-scripts or
musubi-tuner script trains it; its peers are ai-toolkit, SimpleTuner and OneTrainer."""
from __future__ import annotations

from trainers.models.option_sets import DENSITY, DISTILLED, SAMPLING

READS = DENSITY | SAMPLING | DISTILLED
NOTES = {
    "discrete_flow_shift": "ERNIE-Image samples with shift 4.0 (its published scheduler); the presets train with "
                           "3.0, ai-toolkit's training scheduler.",
}
