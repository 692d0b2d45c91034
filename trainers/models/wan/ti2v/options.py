"""Wan 2.2 TI2V 5B: its own option (image-to-video training) and the shared ones it reads (torch-free; see
trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.models.option_sets import DENSITY, SAMPLING
from trainers.models.wan.options import NOTES as WAN21_NOTES
from trainers.models.wan.options import SPLIT_FILES

READS = DENSITY | SAMPLING | SPLIT_FILES
NOTES = {**WAN21_NOTES, "ae": "Wan 2.2's 48-channel autoencoder in diffusers' layout (vae/"
         "diffusion_pytorch_model.safetensors of Wan-AI/Wan2.2-TI2V-5B-Diffusers); ComfyUI's wan2.2_vae.safetensors "
         "(Wan-AI's layout) is refused by name."}
OPTIONS: tuple[Option, ...] = (
    Option("ti2v_first_frame", "bool", False, "Train Wan 2.2 TI2V 5B as image-to-video: each clip's first frame is "
           "given clean (its latent, at timestep 0, as WanImageToVideoPipeline runs the 5B) and only the frames "
           "after it are scored; samples then render from each prompt's --ci first frame. Off: text-to-video.",
           "flow"),
)
