"""Wan 2.1 I2V: its own option (the CLIP image encoder's file beside a single file) and the shared options it reads
(torch-free; see trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.models.option_sets import DENSITY, SAMPLING
from trainers.models.wan.options import NOTES as WAN21_NOTES
from trainers.models.wan.options import SPLIT_FILES

READS = DENSITY | SAMPLING | SPLIT_FILES
NOTES = WAN21_NOTES
OPTIONS: tuple[Option, ...] = (
    Option("clip", "str", "", "A single file of Wan 2.1 I2V (ComfyUI's wan2.1_i2v_480p_14B_fp16.safetensors): its CLIP "
           "image encoder's file, ComfyUI's clip_vision/clip_vision_h.safetensors or Wan-AI's "
           "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth (musubi-tuner's --clip). A diffusers folder has "
           "its own.", "model", path="file", advanced=True),
)
