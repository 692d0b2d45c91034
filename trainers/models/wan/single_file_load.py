"""The Wan families from ComfyUI's split files: what flow_checkpoint.py loads (the diffusion_models file, UMT5-XXL,
the autoencoder) and the files a family reads beside them (its SingleFiles, split_files.py): a Wan 2.2 A14B pair's
high-noise expert (dit_high_noise; the model file is the low-noise one, musubi-tuner's dit) and Wan 2.1 I2V's CLIP image
encoder (clip), each set on the loaded model as the family's folder loading sets it."""
from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
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
    if family.single_files.pair:
        model = with_high_noise_expert(model, ckpt.shapes, files.dit_high_noise, weight_dtype)
    if family.single_files.clip:
        model = with_image_encoder(model, files.clip, weight_dtype)
    return model


def with_high_noise_expert(model: LoadedModel, shapes: Any, path: str, weight_dtype: torch.dtype) -> LoadedModel:
    """The pair (wan22/experts.py) of the high-noise expert's file and the loaded low-noise one, at the task's
    boundary (musubi-tuner's: T2V 0.875, I2V 0.9; timestep_boundary sets the run's)."""
    from trainers.models.single_file.checkpoint import open_checkpoint
    from trainers.models.wan.single_file import transformer
    from trainers.models.wan.split_files import wan_file_kind
    from trainers.models.wan.wan22.experts import ExpertPair

    family = copy.copy(model.family)
    high = transformer(open_checkpoint(path), weight_dtype, f"{family.title} high-noise")
    family.i2v = wan_file_kind(shapes) == "a14b_i2v"
    family.folder_ratio = None  # a diffusion_models file has no boundary_ratio
    family.boundary = family.default_boundary
    return dataclasses.replace(model, family=family, unet=ExpertPair(high, model.unet, family.boundary))


def with_image_encoder(model: LoadedModel, path: str, weight_dtype: torch.dtype) -> LoadedModel:
    """Wan 2.1 I2V's CLIP image encoder (frozen) and its image processor, from the `clip` file."""
    from trainers.models.single_file.checkpoint import open_checkpoint
    from trainers.models.wan.single_file_clip import image_encoder, image_processor

    family = copy.copy(model.family)
    family.image_encoder = image_encoder(open_checkpoint(path).tensors(), weight_dtype, Path(path).name)
    family.image_processor = image_processor(family.image_encoder)
    return dataclasses.replace(model, family=family)
