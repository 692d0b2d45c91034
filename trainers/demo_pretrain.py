"""Teach the tiny demo model grey shapes, so the demo's samples show what its LoRA changes.

A random-init model draws noise before and after any LoRA, and a newcomer cannot see that training did
anything. A few hundred steps on CPU give a model that draws grey circles, squares and triangles from a
caption ("grey circle"); the demo LoRA, trained on crosses, then draws crosses.

What did not work, for the next person here: teaching colour instead. With 32 channels in 32 norm groups
the tiny VAE normalises each channel alone, which loses a flat image's colour; one group keeps colour but
drifts greys to colours and its latents sample badly. Shapes in grey need neither.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from trainers.demo_shapes import DARK_BG, LIGHT_BG, draw_shape

SHAPES = ("circle", "square", "triangle")
SIZE = 64  # the demo's resolution
VAE_STEPS, UNET_STEPS = 500, 600
REPORT_EVERY = 5  # steps between progress reports (the page's progress line)


class Progress(NamedTuple):
    stage: str  # "autoencoder" or "denoiser"
    step: int
    steps: int


def grey_shapes(rng: random.Random, count: int) -> tuple[torch.Tensor, list[str]]:
    """`count` images in [-1, 1] (N, 3, 64, 64) of a grey shape near the centre, and their captions."""
    images, captions = [], []
    for _ in range(count):
        shape, dark = rng.choice(SHAPES), rng.random() < 0.5
        tone = rng.randint(150, 220) if dark else rng.randint(60, 130)
        radius, cx, cy = rng.randint(19, 23), SIZE // 2 + rng.randint(-3, 3), SIZE // 2 + rng.randint(-3, 3)
        img = draw_shape(shape, (tone,) * 3, DARK_BG if dark else LIGHT_BG, (SIZE, SIZE),
                         (cx - radius, cy - radius, cx + radius, cy + radius))
        images.append(np.asarray(img))
        captions.append(f"grey {shape}")
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 127.5 - 1, captions


def pretrain_demo_model(folder: Path, vae_steps: int = VAE_STEPS, unet_steps: int = UNET_STEPS,
                        seed: int = 0) -> Iterator[Progress]:
    """Train the tiny SD1 pipeline saved in `folder`, in place: its VAE, then its UNet and text encoder."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    for step in teach_autoencoder(folder, vae_steps, rng):
        yield Progress("autoencoder", step, vae_steps)
    for step in teach_denoiser(folder, unet_steps, rng):
        yield Progress("denoiser", step, unet_steps)


def teach_autoencoder(folder: Path, steps: int, rng: random.Random) -> Iterator[int]:
    """The VAE learns to carry grey shapes; its scaling factor then gives the UNet unit-variance latents."""
    from diffusers import AutoencoderKL

    vae = AutoencoderKL.from_pretrained(folder / "vae")

    def reconstruction_loss() -> torch.Tensor:  # on 32 px crops: the VAE is convolutional, a quarter of the work
        x, y = rng.randrange(0, 33, 4), rng.randrange(0, 33, 4)
        pixels = grey_shapes(rng, 8)[0][:, :, y:y + 32, x:x + 32]
        posterior = vae.encode(pixels).latent_dist
        return F.mse_loss(vae.decode(posterior.sample()).sample, pixels) + 1e-6 * posterior.kl().mean()

    yield from _train(vae, steps, 2e-3, reconstruction_loss)
    with torch.no_grad():
        latents = vae.encode(grey_shapes(rng, 64)[0]).latent_dist.mode()
    vae.register_to_config(scaling_factor=round(1.0 / float(latents.std()), 5))
    vae.save_pretrained(folder / "vae")


def teach_denoiser(folder: Path, steps: int, rng: random.Random) -> Iterator[int]:
    """The UNet and text encoder learn to draw grey shapes from their captions (and from an empty one)."""
    from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTokenizer

    vae = AutoencoderKL.from_pretrained(folder / "vae").requires_grad_(False)
    unet = UNet2DConditionModel.from_pretrained(folder / "unet")
    text_encoder = CLIPTextModel.from_pretrained(folder / "text_encoder")
    tokenizer = CLIPTokenizer.from_pretrained(folder / "tokenizer")
    noise_scheduler = DDPMScheduler.from_pretrained(folder / "scheduler")

    def denoising_loss() -> torch.Tensor:
        pixels, captions = grey_shapes(rng, 12)
        captions = ["" if rng.random() < 0.1 else c for c in captions]  # the unconditional prompt, for guidance
        ids = tokenizer(captions, padding="max_length", max_length=tokenizer.model_max_length, truncation=True,
                        return_tensors="pt").input_ids
        with torch.no_grad():
            latents = vae.encode(pixels).latent_dist.sample() * vae.config.scaling_factor
        noise = torch.randn_like(latents)
        t = torch.randint(0, noise_scheduler.config.num_train_timesteps, (len(captions),))
        pred = unet(noise_scheduler.add_noise(latents, noise, t), t, text_encoder(ids)[0]).sample
        return F.mse_loss(pred, noise)

    yield from _train(torch.nn.ModuleList([unet, text_encoder]), steps, 1e-3, denoising_loss)
    unet.save_pretrained(folder / "unet")
    text_encoder.save_pretrained(folder / "text_encoder")


def _train(model: torch.nn.Module, steps: int, lr: float, loss_of: Callable[[], torch.Tensor]) -> Iterator[int]:
    """AdamW with a cosine decay to a tenth for `steps` steps; yields every REPORT_EVERY-th step and the last."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps, eta_min=lr / 10)
    for step in range(1, steps + 1):
        loss = loss_of()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % REPORT_EVERY == 0 or step == steps:
            yield step
    model.eval()
