"""LTX-2 image-to-video (an LTX2ImageToVideoPipeline folder), trained as that pipeline conditions on its image: the
clip's first latent frame is the first frame's latent, clean (the VAE's mode of it, normalised; the causal
autoencoder's first latent frame covers the first frame alone, so a clip's cached latents hold it), its tokens at
timestep 0 and the frames after it at the step's (`video_timestep = t * (1 - conditioning_mask)`), the audio stream
and both cross-attentions at the step's timestep; only the frames after the first are scored (a loss mask of 0 on
it). A 1-frame sample (an image) has nothing after its first frame and trains as text-to-video."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass
class FirstFrameSlot:
    """The clean first latent frames (B, C, 1, h, w) of the batch being trained; None outside steps and for 1-frame
    batches."""

    first: torch.Tensor | None = None


def batch_latent_frames(batch: dict[str, Any], frame_rule: int) -> int:
    """The latent frames of a batch's clips (1 for images): its cached latents', else its pixel frames'."""
    if "latent_mean" in batch:
        return int(batch["latent_mean"].shape[2])
    pixels = batch["pixels"]
    return 1 if pixels.ndim == 4 else (int(pixels.shape[1]) - 1) // frame_rule + 1


def clean_first_frame(family: Any, vae: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    """The first frame's normalised latent (B, C, 1, h, w), as the pipeline encodes its image."""
    if "latent_mean" in batch:
        return family.vae_latents(batch["latent_mean"][:, :, :1], vae)
    first = batch["pixels"][:, :1].transpose(1, 2)  # (B, 3, 1, H, W) of (B, F, 3, H, W)
    with torch.no_grad():
        return family.vae_latents(vae.encode(first.to(vae.device, vae.dtype)).latent_dist.mode(), vae)


def conditioned_trainable(trainable: Any, family: Any) -> Any:
    """A method's Trainable whose objective conditions on the first frames (the family's slot)."""
    import dataclasses

    return dataclasses.replace(trainable, objective=conditioned(trainable.objective, family, family.slot))


def conditioned(inner: Any, family: Any, slot: FirstFrameSlot) -> Any:
    """The method's objective with each clip's clean first latent frame in `slot`, that frame out of the loss."""
    def objective(predictor: nn.Module, model: Any, batch: dict[str, Any], opts: Any,
                  weight_dtype: torch.dtype) -> torch.Tensor:
        frames = batch_latent_frames(batch, family.frame_rule)
        if frames == 1:
            return inner(predictor, model, batch, opts, weight_dtype)
        with _held(slot, clean_first_frame(family, model.vae, batch)) as first:
            return inner(predictor, model, {**batch, "masks": _later_frames(first, frames)}, opts, weight_dtype)

    return objective


@contextmanager
def _held(slot: FirstFrameSlot, first: torch.Tensor) -> Iterator[torch.Tensor]:
    slot.first = first
    try:
        yield first
    finally:
        slot.first = None


def _later_frames(first: torch.Tensor, frames: int) -> torch.Tensor:
    """The loss mask (B, 1, frames, h, w) of the frames after the first."""
    later = torch.ones(first.shape[0], 1, frames, *first.shape[-2:])
    later[:, :, 0] = 0
    return later


def video_timesteps(timesteps: torch.Tensor, frames: int, tokens_per_frame: int) -> torch.Tensor:
    """One timestep per packed token (B, frames x tokens_per_frame): 0 on the first frame's, the step's after it."""
    later = torch.ones(frames, tokens_per_frame, device=timesteps.device, dtype=timesteps.dtype)
    later[0] = 0
    return timesteps[:, None] * later.flatten()[None]
