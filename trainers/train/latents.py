"""The batch's latents: the VAE's distribution of its images, and each sample's own draw from it."""
from __future__ import annotations

from typing import Any

import torch

from trainers.models import LoadedModel
from trainers.train.memo import Select
from trainers.train.noise import per_sample


def latent_distribution(model: LoadedModel, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, std) of the VAE's distribution of the batch's images: cached before training, kept from an earlier step
    (`model.latent_memo`, for images whose pixels are the same every epoch: the batch's "pixel_keys"), or encoded."""
    if "latent_mean" in batch:
        return batch["latent_mean"], batch["latent_std"]
    vae = model.vae
    # clips come as (B, F, C, H, W) (trainers/data/video_dataset.py); 3D autoencoders take (B, C, F, H, W)
    pixels = batch["pixels"] if batch["pixels"].ndim == 4 else batch["pixels"].transpose(1, 2)

    def encode(rows: Select) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            dist = vae.encode(pixels[rows].to(vae.device, vae.dtype)).latent_dist
        return dist.mean, dist.std

    memo = model.latent_memo
    return memo(encode, batch.get("pixel_keys")) if memo is not None else encode(slice(None))


def draw_latents(mean: torch.Tensor, std: torch.Tensor, keys: torch.Tensor, seed: int) -> torch.Tensor:
    """A latent drawn from the VAE's distribution with per-sample noise (cached, kept or fresh: the same draw)."""
    eps = per_sample(keys, seed, "latent", lambda g: torch.randn(mean.shape[1:], generator=g))
    return mean + std * eps.to(mean.device, mean.dtype)
