"""The Wan families from ComfyUI's split files: what flow_checkpoint.py loads (the diffusion_models file, UMT5-XXL,
the autoencoder), then the files a family reads beside them (its rules' with_own_files: a pair's second expert, an
image encoder), each set on the loaded model as the family's folder loading sets it."""
from __future__ import annotations

from typing import Any

import torch

from trainers.models.base import LoadedModel, ModelFiles


def load_split_files(family: Any, ckpt: Any, weight_dtype: torch.dtype, vae_path: str,
                     files: ModelFiles) -> LoadedModel:
    """A LoadedModel of a Wan family's diffusion_models file and the files beside it."""
    from trainers.models.flow_checkpoint import load_flow_checkpoint
    from trainers.models.video import encode_images_as_frames

    model = load_flow_checkpoint(family, ckpt, weight_dtype, vae_path, files)
    encode_images_as_frames(model.vae)
    return family.with_own_files(model, ckpt.shapes, files, weight_dtype)
