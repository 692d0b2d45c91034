"""HiDream-I1: the shared options it reads (torch-free; see trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.models.option_sets import DENSITY, DISTILLED, SAMPLING

READS = DENSITY | SAMPLING | DISTILLED
NOTES = {
    "discrete_flow_shift": "HiDream-I1 Full samples with shift 3.0 (Dev 6.0); the presets train with 3.0.",
}
