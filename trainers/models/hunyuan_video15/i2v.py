"""HunyuanVideo 1.5 image-to-video's first-frame conditioning, as HunyuanVideo15ImageToVideoPipeline makes it and
musubi-tuner's hv_1_5_train_network.py --task i2v trains with it: the first frame encoded alone by the VAE (its mode,
scaled), on the first latent frame of zero condition latents, a mask of ones on that frame, both after the noisy
latents on the channel axis (32 + 32 + 1 = the transformer's 65 input channels); and SigLIP's last hidden states of
the first frame as the transformer's image states (729 of them, 1152 wide, for the published so400m encoder). The
first frame is each training clip's own (an image is a 1-frame clip: its own condition), encoded at every step."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn


@dataclass
class FirstFrame:
    """The condition of the batch being trained: the condition latents and mask (B, C + 1, F', h, w) and the image
    states (B, N, D); None outside steps."""

    latents: torch.Tensor | None = None
    image_embeds: torch.Tensor | None = None


@dataclass
class ImageEncoder:
    """I2V's SigLIP vision model and its image processor (frozen; taken to the VAE's device when first used)."""

    model: nn.Module
    processor: Any


def first_frame_condition(vae: nn.Module, encoder: ImageEncoder, pixels: torch.Tensor, latent_frames: int,
                          dtype: torch.dtype) -> FirstFrame:
    """The condition of clips `pixels` (B, F, 3, H, W) or images (B, 3, H, W) in [-1, 1] for latents of
    `latent_frames` frames."""
    first = pixels[:, 0] if pixels.ndim == 5 else pixels  # (B, 3, H, W)
    with torch.no_grad():
        encoded = vae.encode(first.unsqueeze(2).to(vae.device, vae.dtype)).latent_dist.mode()
        image = encoded * vae.config.scaling_factor  # (B, C, 1, h, w)
        condition = torch.cat([image, image.new_zeros(*image.shape[:2], latent_frames - 1, *image.shape[3:])], 2)
        mask = torch.zeros_like(condition[:, :1])
        mask[:, :, 0] = 1
        embeds = image_states(encoder, first, vae.device)
    return FirstFrame(torch.cat([condition, mask], dim=1).to(dtype), embeds.to(dtype))


def image_states(encoder: ImageEncoder, first: torch.Tensor, device: torch.device) -> torch.Tensor:
    """SigLIP's last hidden states of images (B, 3, H, W) in [-1, 1], given to its processor as the 8-bit RGB
    pictures the pipeline gives it (a PIL image's pixels)."""
    model = encoder.model.to(device)
    pictures = ((first.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
    inputs = encoder.processor.preprocess(images=list(np.ascontiguousarray(pictures)), do_resize=True,
                                          return_tensors="pt", do_convert_rgb=True)
    dtype = next(model.parameters()).dtype
    return model(pixel_values=inputs["pixel_values"].to(device, dtype)).last_hidden_state


def conditioned_objective(inner: Any, slot: FirstFrame, encoder: ImageEncoder) -> Any:
    """The method's objective with each batch's first-frame condition in `slot` while it runs."""
    def objective(predictor: nn.Module, model: Any, batch: dict[str, Any], opts: Any,
                  weight_dtype: torch.dtype) -> torch.Tensor:
        if "pixels" not in batch:
            raise ValueError("HunyuanVideo 1.5 image-to-video encodes each clip's first frame at every step: leave "
                             "cache_latents off")
        pixels = batch["pixels"]
        frames = pixels.shape[1] if pixels.ndim == 5 else 1
        latent_frames = (frames - 1) // model.vae.config.temporal_compression_ratio + 1
        condition = first_frame_condition(model.vae, encoder, pixels, latent_frames, weight_dtype)
        slot.latents, slot.image_embeds = condition.latents, condition.image_embeds
        try:
            return inner(predictor, model, batch, opts, weight_dtype)
        finally:
            slot.latents = slot.image_embeds = None

    return objective
