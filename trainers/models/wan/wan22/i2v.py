"""Wan 2.2 I2V A14B's first-frame conditioning, as WanImageToVideoPipeline.prepare_latents makes it and
musubi-tuner's wan_cache_latents.py caches it: the clip's first frame followed by black frames, encoded by the VAE
(its mode) and normalised, after a 4-channel mask (1 on the first frame's latent positions, 0 elsewhere), concatenated
to the noisy latents on the channel axis (16 + 4 + 16 = the transformer's 36 input channels). The first frame is each
training clip's own (an image is a 1-frame clip: its own condition). Wan 2.2's I2V reads no CLIP image features
(musubi-tuner: `clip_fea` only for Wan 2.1). With cached latents the image latent is cached with each window's
(`window_extras`, the batch's `cached_first_frame`, as musubi-tuner's wan_cache_latents.py caches it with each item)
and the mask made from the window's latent frames: the VAE does not run in the steps."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from trainers.data.video_cache import WindowExtras
from trainers.data.video_dataset import EXTRA

TEMPORAL = 4  # the VAE's temporal compression: a latent frame covers 4 frames (the first covers 1)
CACHED = "first_frame"  # the latent cache's name of a window's first-frame latent (the batch's cached_first_frame)
EXTRAS_KEY = "wan-first-frame-latent-1"  # what the cached extras are (the VAE's weights are in the entries' key)
EXTRA_NAME = EXTRA + CACHED


@dataclass
class ConditionSlot:
    """The condition of the batch being trained (None outside steps), (B, 4 + C, F', h, w)."""

    condition: torch.Tensor | None = None


def first_frame_latent(vae: nn.Module, pixels: torch.Tensor) -> torch.Tensor:
    """The normalised image latent (B, C, F', h, w), in the VAE's dtype, of clips `pixels` (B, F, 3, H, W) or images
    (B, 3, H, W) in [-1, 1]: their first frame followed by black frames."""
    from trainers.models.wan.family import latent_stats

    clips = pixels.unsqueeze(1) if pixels.ndim == 4 else pixels  # (B, F, 3, H, W)
    video = torch.zeros_like(clips).transpose(1, 2)  # (B, 3, F, H, W): black after the first frame
    video[:, :, 0] = clips[:, 0]
    with torch.no_grad():
        encoded = vae.encode(video.to(vae.device, vae.dtype)).latent_dist.mode()
    mean, std = latent_stats(vae, encoded)
    return (encoded - mean) / std


def first_frame_condition(vae: nn.Module, pixels: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The mask and image latent of clips `pixels` (B, F, 3, H, W) or images (B, 3, H, W) in [-1, 1]."""
    frames = 1 if pixels.ndim == 4 else pixels.shape[1]
    return with_mask(first_frame_latent(vae, pixels).to(dtype), frames)


def with_mask(latent: torch.Tensor, frames: int) -> torch.Tensor:
    return torch.cat([frame_mask(latent, frames), latent], dim=1)


def batch_condition(vae: nn.Module, batch: dict[str, Any], dtype: torch.dtype, family: str) -> torch.Tensor:
    """The batch's condition: from its cached first-frame latents (a window of F' latent frames is 1 + 4 (F' - 1)
    frames), else encoded from its pixels."""
    if EXTRA_NAME in batch:
        latent = batch[EXTRA_NAME].to(dtype)
        return with_mask(latent, 1 + TEMPORAL * (latent.shape[2] - 1))
    if "pixels" not in batch:
        raise ValueError(f"{family} image-to-video needs each clip's first frame: its cached latents were made "
                         "without it (delete the cache folder's files, or leave cache_latents off)")
    return first_frame_condition(vae, batch["pixels"], dtype)


def window_extras(vae: nn.Module, key: str = "", **more: Callable[[torch.Tensor], torch.Tensor]) -> WindowExtras:
    """The latent cache's extras of a window: its first-frame latent, and `more` (name: encoder of the window's
    pixels), `key` naming what those depend on."""
    def encode(pixels: torch.Tensor) -> dict[str, torch.Tensor]:
        return {CACHED: first_frame_latent(vae, pixels), **{name: fn(pixels) for name, fn in more.items()}}

    return WindowExtras(f"{EXTRAS_KEY}|{key}" if key else EXTRAS_KEY, encode)


def frame_mask(latent: torch.Tensor, frames: int) -> torch.Tensor:
    """WanImageToVideoPipeline's mask (B, 4, F', h, w): the first frame repeated 4 times, then one row per frame,
    folded 4 to a latent frame."""
    batch, _, latent_frames, height, width = latent.shape
    mask = torch.zeros(batch, 1, frames, height, width, device=latent.device, dtype=latent.dtype)
    mask[:, :, 0] = 1
    mask = torch.cat([mask[:, :, :1].repeat_interleave(TEMPORAL, dim=2), mask[:, :, 1:]], dim=2)
    return mask.view(batch, -1, TEMPORAL, height, width).transpose(1, 2)[:, :, :latent_frames]


def conditioned_objective(inner: Any, slot: ConditionSlot) -> Any:
    """The method's objective with each batch's first-frame condition in `slot` while it runs."""
    def objective(predictor: nn.Module, model: Any, batch: dict[str, Any], opts: Any,
                  weight_dtype: torch.dtype) -> torch.Tensor:
        slot.condition = batch_condition(model.vae, batch, weight_dtype, "Wan 2.2")
        try:
            return inner(predictor, model, batch, opts, weight_dtype)
        finally:
            slot.condition = None

    return objective
