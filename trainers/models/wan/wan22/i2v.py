"""Wan 2.2 I2V A14B's first-frame conditioning, as WanImageToVideoPipeline.prepare_latents makes it and
musubi-tuner's wan_cache_latents.py caches it: the clip's first frame followed by black frames, encoded by the VAE
(its mode) and normalised, after a 4-channel mask (1 on the first frame's latent positions, 0 elsewhere), concatenated
to the noisy latents on the channel axis (16 + 4 + 16 = the transformer's 36 input channels). The first frame is each
training clip's own (an image is a 1-frame clip: its own condition). Wan 2.2's I2V reads no CLIP image features
(musubi-tuner: `clip_fea` only for Wan 2.1)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

TEMPORAL = 4  # the VAE's temporal compression: a latent frame covers 4 frames (the first covers 1)


@dataclass
class ConditionSlot:
    """The condition of the batch being trained (None outside steps), (B, 4 + C, F', h, w)."""

    condition: torch.Tensor | None = None


def first_frame_condition(vae: nn.Module, pixels: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The mask and image latent of clips `pixels` (B, F, 3, H, W) or images (B, 3, H, W) in [-1, 1]."""
    from trainers.models.wan.family import latent_stats

    clips = pixels.unsqueeze(1) if pixels.ndim == 4 else pixels  # (B, F, 3, H, W)
    frames = clips.shape[1]
    video = torch.zeros_like(clips).transpose(1, 2)  # (B, 3, F, H, W): black after the first frame
    video[:, :, 0] = clips[:, 0]
    with torch.no_grad():
        encoded = vae.encode(video.to(vae.device, vae.dtype)).latent_dist.mode()
    mean, std = latent_stats(vae, encoded)
    latent = ((encoded - mean) / std).to(dtype)
    return torch.cat([frame_mask(latent, frames), latent], dim=1)


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
        if "pixels" not in batch:
            raise ValueError("Wan 2.2 image-to-video encodes each clip's first frame at every step: leave "
                             "cache_latents off")
        slot.condition = first_frame_condition(model.vae, batch["pixels"], weight_dtype)
        try:
            return inner(predictor, model, batch, opts, weight_dtype)
        finally:
            slot.condition = None

    return objective
