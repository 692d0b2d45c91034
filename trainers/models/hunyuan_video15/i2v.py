"""HunyuanVideo 1.5 image-to-video's first-frame conditioning, as HunyuanVideo15ImageToVideoPipeline makes it and
musubi-tuner's hv_1_5_train_network.py --task i2v trains with it: the first frame encoded alone by the VAE (its mode,
scaled), on the first latent frame of zero condition latents, a mask of ones on that frame, both after the noisy
latents on the channel axis (32 + 32 + 1 = the transformer's 65 input channels); and SigLIP's last hidden states of
the first frame as the transformer's image states (729 of them, 1152 wide, for the published so400m encoder). The
first frame is each training clip's own (an image is a 1-frame clip: its own condition), encoded at every step; with
cached latents its latent and SigLIP's states are cached with each window's (`window_extras`, the batch's
`cached_first_frame` and `cached_image_states`, as musubi-tuner's hv_1_5_cache_latents.py --i2v caches them with each
item) and the condition made from them: neither the VAE nor SigLIP runs in the steps."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from trainers.data.video_cache import WindowExtras
from trainers.data.video_dataset import EXTRA

FIRST_FRAME, IMAGE_STATES = "first_frame", "image_states"  # the latent cache's names of a window's extras
EXTRAS_KEY = "hunyuan-video15-first-frame-1"  # what they are (the VAE's weights are in the entries' key)


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
        latent, embeds = first_frame_latent(vae, first), image_states(encoder, first, vae.device)
    return FirstFrame(condition_latents(latent, latent_frames).to(dtype), embeds.to(dtype))


def first_frame_latent(vae: nn.Module, first: torch.Tensor) -> torch.Tensor:
    """The first frames (B, 3, H, W) encoded alone by the VAE, its mode scaled: (B, C, 1, h, w)."""
    with torch.no_grad():
        encoded = vae.encode(first.unsqueeze(2).to(vae.device, vae.dtype)).latent_dist.mode()
    return encoded * vae.config.scaling_factor


def condition_latents(image: torch.Tensor, latent_frames: int) -> torch.Tensor:
    """The condition latents and mask (B, C + 1, F', h, w) of first-frame latents `image` (B, C, 1, h, w): the image
    on the first latent frame of zeros, a mask of ones on that frame."""
    condition = torch.cat([image, image.new_zeros(*image.shape[:2], latent_frames - 1, *image.shape[3:])], 2)
    mask = torch.zeros_like(condition[:, :1])
    mask[:, :, 0] = 1
    return torch.cat([condition, mask], dim=1)


def window_extras(vae: nn.Module, encoder: ImageEncoder) -> WindowExtras:
    """The latent cache's extras of a window: its first frame's latent and SigLIP's states of it, keyed by the image
    encoder's weights and its processor's settings."""
    from trainers.data.cache import vae_fingerprint

    def encode(pixels: torch.Tensor) -> dict[str, torch.Tensor]:  # (B, F, 3, H, W), an image as F = 1
        first = pixels[:, 0]
        with torch.no_grad():
            out = {FIRST_FRAME: first_frame_latent(vae, first), IMAGE_STATES: image_states(encoder, first, vae.device)}
        encoder.model.to("cpu")  # back to the host after each window: the caption pass and the steps need none of it
        return out

    key = f"{EXTRAS_KEY}|{vae_fingerprint(encoder.model)}|{encoder.processor.to_json_string()}"
    return WindowExtras(key, encode)


def batch_condition(vae: nn.Module, encoder: ImageEncoder, batch: dict[str, Any], dtype: torch.dtype) -> FirstFrame:
    """The batch's condition: from its cached first-frame latents and image states (their latent frames: the cached
    latents'), else encoded from its pixels."""
    if EXTRA + FIRST_FRAME in batch:
        latent_frames = batch["latent_mean"].shape[2]
        return FirstFrame(condition_latents(batch[EXTRA + FIRST_FRAME], latent_frames).to(dtype),
                          batch[EXTRA + IMAGE_STATES].to(dtype))
    if "pixels" not in batch:
        raise ValueError("HunyuanVideo 1.5 image-to-video needs each clip's first frame: its cached latents were made "
                         "without it (delete the cache folder's files, or leave cache_latents off)")
    pixels = batch["pixels"]
    frames = pixels.shape[1] if pixels.ndim == 5 else 1
    return first_frame_condition(vae, encoder, pixels, (frames - 1) // vae.config.temporal_compression_ratio + 1,
                                 dtype)


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
        condition = batch_condition(model.vae, encoder, batch, weight_dtype)
        slot.latents, slot.image_embeds = condition.latents, condition.image_embeds
        try:
            return inner(predictor, model, batch, opts, weight_dtype)
        finally:
            slot.latents = slot.image_embeds = None

    return objective
