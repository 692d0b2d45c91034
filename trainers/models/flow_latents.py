"""Latents as the transformers of the packed flow families (FLUX.1, Chroma) read them: each 2x2 patch one token, with
(0, row, column) position ids."""
from __future__ import annotations

import torch


def pack_latents(latents: torch.Tensor) -> torch.Tensor:
    """(B, C, h, w) -> (B, h/2 x w/2, C x 4): each 2x2 patch one token, row by row."""
    b, c, h, w = latents.shape
    patches = latents.reshape(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return patches.reshape(b, (h // 2) * (w // 2), c * 4)


def unpack_latents(tokens: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The inverse of pack_latents for latents of (height, width)."""
    b, _, channels = tokens.shape
    c = channels // 4
    patches = tokens.reshape(b, height // 2, width // 2, c, 2, 2).permute(0, 3, 1, 4, 2, 5)
    return patches.reshape(b, c, height, width)


def image_ids(rows: int, cols: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """(rows x cols, 3) position ids of the packed tokens: (0, row, column)."""
    ids = torch.zeros(rows, cols, 3, device=device, dtype=dtype)
    ids[..., 1] = torch.arange(rows, device=device, dtype=dtype)[:, None]
    ids[..., 2] = torch.arange(cols, device=device, dtype=dtype)[None, :]
    return ids.reshape(rows * cols, 3)


def packed_grid(tokens: torch.Tensor, vae_scale: int, width: int, height: int) -> torch.Tensor:
    """The latent grid (B, C, h, w) of packed tokens a pipeline returns for an image of width x height pixels."""
    return unpack_latents(tokens, 2 * (height // (vae_scale * 2)), 2 * (width // (vae_scale * 2)))
