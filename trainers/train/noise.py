"""The random part of a training step: noise, its offsets and perturbations, timesteps.

Every draw comes from the sample's own generator (`per_sample`, one stream name per use), never
from a global RNG, so a sample gets the same noise whatever batch or process it lands in. The
formulas are sd-scripts' (library/train_util.py get_noise_noisy_latents_and_timesteps,
library/custom_train_functions.py); where sd-scripts draws one value for a whole batch, each
sample draws its own here.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from trainers.data.dataset import sample_generator


def per_sample(keys: torch.Tensor, seed: int, stream: str,
               draw: Callable[[torch.Generator], torch.Tensor]) -> torch.Tensor:
    """`draw` with each sample's generator for `stream`, stacked: keys are (epoch, index) rows."""
    return torch.stack([draw(sample_generator(seed, int(e), int(i), stream)) for e, i in keys.tolist()])


def draw_timesteps(keys: torch.Tensor, seed: int, low: int, high: int) -> torch.Tensor:
    """Timesteps in [low, high); all `high` when low == high (sd-scripts' get_timesteps)."""
    if low >= high:
        return torch.full((len(keys),), high, dtype=torch.long)
    return per_sample(keys, seed, "timestep", lambda g: torch.randint(low, high, (), generator=g))


def strengths(keys: torch.Tensor, seed: int, stream: str, scale: float, random: bool) -> torch.Tensor:
    """(B, 1, 1, 1): `scale`, or a uniform draw in [0, scale) per sample when `random`."""
    if not random:
        return torch.full((len(keys), 1, 1, 1), float(scale))
    return scale * per_sample(keys, seed, stream, lambda g: torch.rand((), generator=g)).view(-1, 1, 1, 1)


def offset_noise(latents: torch.Tensor, keys: torch.Tensor, seed: int, noise_offset: float,
                 random_strength: bool, adaptive_scale: float | None) -> torch.Tensor:
    """The noise offset term added to the noise: strength (B, C, 1, 1) x a per-channel normal draw."""
    strength = strengths(keys, seed, "offset_strength", noise_offset, random_strength).to(latents.device)
    if adaptive_scale is not None:
        mean = latents.float().mean(dim=(2, 3), keepdim=True).abs()
        strength = torch.clamp(strength + adaptive_scale * mean, min=0.0)
    channels = latents.shape[1]
    draw = per_sample(keys, seed, "offset", lambda g: torch.randn(channels, 1, 1, generator=g))
    return strength * draw.to(latents.device)


def pyramid_levels(shape: torch.Size, generator: torch.Generator, iterations: int, discount: float) -> torch.Tensor:
    """sd-scripts' multires (pyramid) noise levels of one sample, summed at full size: level i is a normal
    draw at 1/r^i of the size (r uniform in [2, 4), drawn per level), upsampled bilinearly, times discount^i."""
    channels, height, width = shape
    total = torch.zeros(shape)
    for i in range(iterations):
        r = float(torch.rand((), generator=generator)) * 2 + 2
        h, w = max(1, int(height / r**i)), max(1, int(width / r**i))
        level = torch.randn(1, channels, h, w, generator=generator)
        total += F.interpolate(level, size=(height, width), mode="bilinear")[0] * discount**i
        if h == 1 or w == 1:
            break
    return total


def multires_noise(noise: torch.Tensor, keys: torch.Tensor, seed: int, iterations: int,
                   discount: float) -> torch.Tensor:
    """`noise` plus its pyramid levels, scaled back to unit std per sample (sd-scripts: over the batch)."""
    levels = per_sample(keys, seed, "multires", lambda g: pyramid_levels(noise.shape[1:], g, iterations, discount))
    out = noise.float() + levels.to(noise.device)
    return out / out.flatten(1).std(dim=1).view(-1, 1, 1, 1)


def input_perturbation(keys: torch.Tensor, seed: int, shape: torch.Size, gamma: float,
                       random_strength: bool) -> torch.Tensor:
    """Extra noise for the noised input only (ip_noise_gamma): strength x a normal draw."""
    strength = strengths(keys, seed, "ip_strength", gamma, random_strength)
    return strength * per_sample(keys, seed, "ip_noise", lambda g: torch.randn(shape, generator=g))
