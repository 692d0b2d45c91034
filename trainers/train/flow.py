"""Flow-matching training of the flow families, with sd-scripts' meanings (library/flux_train_utils.py,
library/sd3_train_utils.py, sd3_train_network.py, flux_train_network.py).

The noisy input at noise level sigma is `(1 - sigma) * latents + sigma * noise` and the timestep is `1000 * sigma`;
the family draws sigma (FlowFamily.draw_sigmas) and scales its VAE's latents. Velocity families (FLUX, Chroma,
Z-Image) are scored against `noise - latents`, their output taken as `model_prediction_type` says. SD3's output is
turned into a latents estimate (`noisy - sigma * output`) scored against the latents. Every random draw is the
sample's own (trainers/train/noise.py), so batch splits train alike.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Protocol

import torch
from torch import nn

from trainers.models import LoadedModel
from trainers.models.flow import FlowSettings
from trainers.models.flow_sigmas import (  # noqa: F401 - the sigma draws, also imported from here
    NUM_TIMESTEPS,
    density,
    flux_resolution_shift,
    flux_sigmas,
    loss_weights,
    sd3_sigmas,
    shifted,
    shifted_schedule,
)
from trainers.train.conditioning import conditioning
from trainers.train.latents import draw_latents, latent_distribution
from trainers.train.losses import apply_mask, elementwise_loss, huber_thresholds
from trainers.train.noise import input_perturbation, per_sample

class NoiseOptions(Protocol):
    """What flow matching reads of the run's loss options (trainers/train/diffusion.py NoiseOptions has them)."""

    seed: int
    loss_type: str
    huber_schedule: str
    huber_c: float
    huber_scale: float
    min_timestep: int | None
    max_timestep: int | None
    ip_noise_gamma: float
    ip_noise_gamma_random_strength: bool


@dataclass
class FlowNoised:
    noise: torch.Tensor  # without the input perturbation
    noisy: torch.Tensor  # the model's input
    sigmas: torch.Tensor  # (B,)
    timesteps: torch.Tensor  # (B,) floats, 1000 * sigma


# A family's noise-level draw: (normal, uniform, latent (h, w)) -> sigmas (B,).
SigmaDraw = Callable[[torch.Tensor, torch.Tensor, tuple[int, int]], torch.Tensor]


def add_flow_noise(latents: torch.Tensor, keys: torch.Tensor, settings: FlowSettings, opts: NoiseOptions,
                   velocity: bool) -> FlowNoised:
    """Noise each sample's latents at its own noise level: FLUX's sampling when `velocity`, else SD3's."""
    def draw(normal: torch.Tensor, uniform: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        if velocity:
            return flux_sigmas(settings, normal, uniform, size)
        return sd3_sigmas(settings, normal, uniform, opts.min_timestep, opts.max_timestep)

    return noise_latents(latents, keys, opts, draw)


# A family's noise as its noisy input takes it at each sample's noise level: (noise, sigmas (B,)) -> noise.
NoiseShape = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def noise_latents(latents: torch.Tensor, keys: torch.Tensor, opts: NoiseOptions, draw: SigmaDraw,
                  shape_noise: NoiseShape | None = None) -> FlowNoised:
    """Noise each sample's latents at its own noise level, drawn by `draw` from the sample's own random numbers;
    `shape_noise` (a family's FlowFamily.shaped_noise, e.g. HiDream-O1's clipped and scaled pixel noise) first."""
    device, shape = latents.device, latents.shape[1:]
    noise = per_sample(keys, opts.seed, "noise", lambda g: torch.randn(shape, generator=g)).to(device, latents.dtype)
    normal = per_sample(keys, opts.seed, "flow_normal", lambda g: torch.randn((), generator=g))
    uniform = per_sample(keys, opts.seed, "flow_uniform", lambda g: torch.rand((), generator=g))
    sigmas = draw(normal, uniform, (latents.shape[-2], latents.shape[-1])).to(device)
    if shape_noise is not None:
        noise = shape_noise(noise, sigmas)
    s = sigmas.view(-1, *[1] * (latents.ndim - 1)).to(latents.dtype)
    noised_with = noise
    if opts.ip_noise_gamma:
        extra = input_perturbation(keys, opts.seed, shape, opts.ip_noise_gamma, opts.ip_noise_gamma_random_strength)
        noised_with = noise + extra.to(device, latents.dtype)
    noisy = (1 - s) * latents + s * noised_with
    return FlowNoised(noise, noisy, sigmas, sigmas * NUM_TIMESTEPS)


def flow_latents(model: LoadedModel, batch: dict[str, Any], seed: int) -> torch.Tensor:
    """The batch's latents as the family's transformer reads them (shifted and scaled as its VAE says)."""
    raw = draw_latents(*latent_distribution(model, batch), batch["keys"], seed)
    return model.family.vae_latents(raw, model.vae)


def flow_loss(predictor: nn.Module, model: LoadedModel, batch: dict[str, Any], opts: NoiseOptions,
              weight_dtype: torch.dtype) -> torch.Tensor:
    """Noise the batch's latents at random noise levels and score the model's output (the flow families' objective)."""
    family = model.family
    velocity = family.flow_target == "velocity"
    device = next(p for p in model.unet.parameters()).device
    keys = batch["keys"]
    latents = flow_latents(model, batch, opts.seed).to(device, weight_dtype)

    def draw(normal: torch.Tensor, uniform: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        return family.draw_sigmas(normal, uniform, size, opts.min_timestep, opts.max_timestep)

    noised = noise_latents(latents, keys, opts, draw, family.shaped_noise)
    output = predictor(noised.noisy, noised.timesteps, *conditioning(batch, device))
    pred, target, weights = prediction_and_target(output, noised, latents, family.settings, velocity)
    return flow_score(pred, target, weights, noised.timesteps, opts, batch.get("masks"), batch.get("loss_weights"))


def prediction_and_target(output: torch.Tensor, noised: FlowNoised, latents: torch.Tensor, settings: FlowSettings,
                          velocity: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(what is scored, its target, per-sample loss weights or None). SD3 (not `velocity`): the latents estimate
    `noisy - sigma * output` against the latents, weighted by weighting_scheme. FLUX: the output as
    model_prediction_type says against `noise - latents`; only 'sigma_scaled' is weighted (as in sd-scripts, whose
    'sigma_scaled' compares that estimate with the velocity)."""
    sigmas = noised.sigmas.view(-1, *[1] * (output.ndim - 1)).to(output.dtype)
    if not velocity:
        return noised.noisy - sigmas * output, latents, loss_weights(settings.weighting_scheme, noised.sigmas)
    target = noised.noise - latents
    how = settings.model_prediction_type
    if how == "additive":
        return output + noised.noisy, target, None
    if how == "sigma_scaled":
        return noised.noisy - sigmas * output, target, loss_weights(settings.weighting_scheme, noised.sigmas)
    return output, target, None


def flow_score(pred: torch.Tensor, target: torch.Tensor, weights: torch.Tensor | None, timesteps: torch.Tensor,
               opts: NoiseOptions, masks: torch.Tensor | None = None, loss_weights_: torch.Tensor | None = None
               ) -> torch.Tensor:
    """The batch's loss in sd-scripts' order: element-wise loss, noise-level weights, mask, mean per sample, sample
    weights, mean."""
    huber_c = None
    if opts.loss_type in ("huber", "smooth_l1"):
        huber_c = huber_thresholds(_Schedule, timesteps, opts.huber_schedule, opts.huber_c, opts.huber_scale)
    loss = elementwise_loss(pred.float(), target.float(), opts.loss_type, huber_c)
    if weights is not None:
        loss = loss * weights.to(loss.device).view(-1, *[1] * (loss.ndim - 1))
    if masks is not None:
        loss = apply_mask(loss, masks)
    loss = loss.mean(dim=tuple(range(1, loss.ndim)))
    if loss_weights_ is not None:  # regularization images (prior_loss_weight) and padding samples (0)
        loss = loss * loss_weights_.to(loss.device)
    return loss.mean()


class _Schedule:
    """What the Huber thresholds read of a schedule: its length (flow matching has no SNR table)."""

    config = SimpleNamespace(num_train_timesteps=NUM_TIMESTEPS)
