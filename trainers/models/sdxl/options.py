"""SDXL: the shared options it reads (torch-free; see trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.models.option_sets import UNET, UNET_NOTES

READS = UNET
NOTES = {**UNET_NOTES, "block_dims": "23 numbers.", "down_lr_weight": "9 numbers.", "mid_lr_weight": "3 numbers.",
         "no_half_vae": "its VAE overflows in fp16 and always stays float32 under fp16.",
         "text_encoder_lr": "two values set its two text encoders apart."}
