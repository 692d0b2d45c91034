"""SD1.x and SD2.x: their own option and the shared ones they read (torch-free; see
trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.models.option_sets import UNET, UNET_NOTES

READS = UNET
NOTES = {**UNET_NOTES, "block_dims": "25 numbers.", "down_lr_weight": "12 numbers.", "mid_lr_weight": "1 number."}
OPTIONS: tuple[Option, ...] = (
    Option("clip_skip", "int", 1, "Use the output of the N-th text-encoder layer from the end (1 = last).", "model",
           min=1, max=12, advanced=True),
)
