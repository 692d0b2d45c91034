"""Wan 2.2 TI2V 5B trained as image-to-video (ti2v_first_frame), as WanImageToVideoPipeline runs it with
expand_timesteps: the clip's first latent frame is the image's latent, clean (the VAE's mode of the first frame alone,
normalised: the causal VAE's first latent frame covers the first frame only), its tokens at timestep 0, the other
frames noised at the step's timestep; only the frames after the first are scored (a loss mask of 0 on the first). A
1-frame sample (an image) has nothing after its first frame and trains as text-to-video."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass
class FirstFrameSlot:
    """The clean first latent frames of the batch being trained (None outside steps and for 1-frame batches)."""

    first: torch.Tensor | None = None


def first_latent_frame(family: Any, vae: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    """(B, C, 1, h, w): the first frame's latent as the pipeline encodes its image (cached latents: their mean)."""
    if "latent_mean" in batch:
        return family.vae_latents(batch["latent_mean"][:, :, :1], vae)
    clips = batch["pixels"]  # (B, F, 3, H, W)
    with torch.no_grad():
        encoded = vae.encode(clips[:, :1].transpose(1, 2).to(vae.device, vae.dtype)).latent_dist.mode()
    return family.vae_latents(encoded, vae)


def latent_frames(batch: dict[str, Any]) -> int:
    if "latent_mean" in batch:
        return int(batch["latent_mean"].shape[2])
    pixels = batch["pixels"]
    return 1 if pixels.ndim == 4 else (int(pixels.shape[1]) - 1) // 4 + 1


def first_frame_objective(inner: Any, family: Any, slot: FirstFrameSlot) -> Any:
    """The method's objective with each clip's clean first latent frame in `slot` and the first frame left out of
    the loss."""
    def objective(predictor: nn.Module, model: Any, batch: dict[str, Any], opts: Any,
                  weight_dtype: torch.dtype) -> torch.Tensor:
        if latent_frames(batch) == 1:
            return inner(predictor, model, batch, opts, weight_dtype)
        first = first_latent_frame(family, model.vae, batch)
        slot.first = first
        mask = torch.ones(first.shape[0], 1, latent_frames(batch), *first.shape[-2:])
        mask[:, :, 0] = 0
        try:
            return inner(predictor, model, {**batch, "masks": mask}, opts, weight_dtype)
        finally:
            slot.first = None

    return objective


def conditioned_inputs(noisy: torch.Tensor, timesteps: torch.Tensor, first: torch.Tensor,
                       patch: tuple[int, int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(the model input with its first frame the clean latent, one timestep per token: 0 on the first frame's), as
    WanImageToVideoPipeline makes them with expand_timesteps (`temp_ts = (mask[0][0][:, ::2, ::2] * t).flatten()`)."""
    frames, height, width = noisy.shape[2], noisy.shape[3] // patch[1], noisy.shape[4] // patch[2]
    model_input = torch.cat([first.to(noisy.device, noisy.dtype), noisy[:, :, 1:]], dim=2)
    per_frame = torch.ones(frames, height * width, device=noisy.device, dtype=timesteps.dtype)
    per_frame[0] = 0
    return model_input, timesteps[:, None] * per_frame.flatten()[None]
