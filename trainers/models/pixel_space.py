"""The autoencoder of a pixel-space family (HiDream-O1-Image): none. It stands where the model layer reads a VAE
(latent caching and memos, the flow layer's latents, samples' decoding), with the pixels themselves as the latents:
encode gives the images in [-1, 1] (a distribution of no spread), decode gives them back. The family's denoise packs
them into its patch tokens, as the latent families pack their latents."""
from __future__ import annotations

from types import SimpleNamespace

import torch
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin


class PixelSpace(ModelMixin, ConfigMixin):
    """Identity 'autoencoder': latents are pixels (B, 3, H, W) in [-1, 1]; scaling 1, shift 0, no downsampling."""

    @register_to_config
    def __init__(self, scaling_factor: float = 1.0, shift_factor: float = 0.0, latent_channels: int = 3) -> None:
        super().__init__()
        # a parameter of no size: where it sits is the device and dtype the layer moves "the VAE" to and reads back
        self.anchor = torch.nn.Parameter(torch.zeros(0), requires_grad=False)

    def encode(self, pixels: torch.Tensor) -> SimpleNamespace:
        mean = pixels.to(self.anchor.dtype)
        dist = SimpleNamespace(mean=mean, std=torch.zeros_like(mean), mode=lambda: mean, sample=lambda **_: mean)
        return SimpleNamespace(latent_dist=dist)

    def decode(self, latents: torch.Tensor) -> SimpleNamespace:
        return SimpleNamespace(sample=latents)
