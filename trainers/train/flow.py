"""Flow-matching training of the flow families (SD3, FLUX), with sd-scripts' meanings (library/flux_train_utils.py,
library/sd3_train_utils.py, sd3_train_network.py, flux_train_network.py).

The noisy input at noise level sigma is `(1 - sigma) * latents + sigma * noise` and the timestep is `1000 * sigma`.
FLUX predicts the velocity `noise - latents`: the target; its `model_prediction_type` says how the output is taken
before the loss. SD3's output is turned into a latents estimate (`noisy - sigma * output`) scored against the
latents. Every random draw is the sample's own (trainers/train/noise.py), so batch splits train alike.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Protocol

import torch
from torch import nn

from trainers.models import LoadedModel
from trainers.models.flow import FlowSettings
from trainers.train.conditioning import conditioning
from trainers.train.latents import draw_latents, latent_distribution
from trainers.train.losses import apply_mask, elementwise_loss, huber_thresholds
from trainers.train.noise import input_perturbation, per_sample

NUM_TIMESTEPS = 1000


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


def density(scheme: str, normal: torch.Tensor, uniform: torch.Tensor, logit_mean: float, logit_std: float,
            mode_scale: float) -> torch.Tensor:
    """weighting_scheme's draw in [0, 1] (sd-scripts' compute_density_for_timestep_sampling) from one standard normal
    and one uniform draw per sample: logit-normal, the 'mode' density, or uniform."""
    if scheme == "logit_normal":
        return torch.sigmoid(normal * logit_std + logit_mean)
    if scheme == "mode":
        return 1 - uniform - mode_scale * (torch.cos(math.pi * uniform / 2) ** 2 - 1 + uniform)
    return uniform


def shifted(sigmas: torch.Tensor, shift: float) -> torch.Tensor:
    """The discrete flow shift: shift * s / (1 + (shift - 1) * s)."""
    return sigmas * shift / (1 + (shift - 1) * sigmas)


def flux_resolution_shift(sigmas: torch.Tensor, tokens: int) -> torch.Tensor:
    """FLUX.1 dev's shift for an image of `tokens` packed tokens: mu linear from 0.5 at 256 tokens to 1.15 at 4096,
    sigma' = e^mu / (e^mu + 1 / sigma - 1)."""
    mu = 0.5 + (1.15 - 0.5) / (4096 - 256) * (tokens - 256)
    return math.exp(mu) / (math.exp(mu) + (1 / sigmas - 1))


@functools.cache
def shifted_schedule(shift: float) -> torch.Tensor:
    """The 1000 noise levels of a FlowMatchEulerDiscreteScheduler(1000, shift), from the noisiest."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler(num_train_timesteps=NUM_TIMESTEPS, shift=shift).sigmas.float().clone()


def flux_sigmas(settings: FlowSettings, normal: torch.Tensor, uniform: torch.Tensor, latent_size: tuple[int, int]
                ) -> torch.Tensor:
    """FLUX's noise levels (B,) by timestep_sampling (sd-scripts' get_noisy_model_input_and_timesteps)."""
    how = settings.timestep_sampling
    if how == "uniform":
        return uniform
    logistic = torch.sigmoid(settings.sigmoid_scale * normal)
    if how == "sigmoid":
        return logistic
    if how == "shift":
        return shifted(logistic, settings.discrete_flow_shift)
    if how == "flux_shift":
        height, width = latent_size
        return flux_resolution_shift(logistic, (height // 2) * (width // 2))
    u = density(settings.weighting_scheme, normal, uniform, settings.logit_mean, settings.logit_std,
                settings.mode_scale)
    index = (u * NUM_TIMESTEPS).long().clamp(0, NUM_TIMESTEPS - 1)
    return shifted_schedule(settings.discrete_flow_shift)[index]


def sd3_sigmas(settings: FlowSettings, normal: torch.Tensor, uniform: torch.Tensor, min_timestep: int | None,
               max_timestep: int | None) -> torch.Tensor:
    """SD3's noise levels (B,): weighting_scheme's density, shifted by training_shift, as a whole timestep in
    [min_timestep, max_timestep) over 1000."""
    u = density(settings.weighting_scheme, normal, uniform, settings.logit_mean, settings.logit_std,
                settings.mode_scale)
    u = shifted(u, settings.training_shift)
    low = min_timestep if min_timestep is not None else 0
    high = max_timestep if max_timestep is not None else NUM_TIMESTEPS
    return (u * (high - low) + low).long().float() / NUM_TIMESTEPS


def loss_weights(scheme: str, sigmas: torch.Tensor) -> torch.Tensor:
    """Per-sample loss weights of weighting_scheme 'sigma_sqrt' (sigma^-2) and 'cosmap'; ones otherwise."""
    if scheme == "sigma_sqrt":
        return (sigmas ** -2.0).float()
    if scheme == "cosmap":
        return 2 / (math.pi * (1 - 2 * sigmas + 2 * sigmas ** 2))
    return torch.ones_like(sigmas)


def add_flow_noise(latents: torch.Tensor, keys: torch.Tensor, settings: FlowSettings, opts: NoiseOptions,
                   velocity: bool) -> FlowNoised:
    """Noise each sample's latents at its own noise level: FLUX's sampling when `velocity`, else SD3's."""
    device, shape = latents.device, latents.shape[1:]
    noise = per_sample(keys, opts.seed, "noise", lambda g: torch.randn(shape, generator=g)).to(device, latents.dtype)
    normal = per_sample(keys, opts.seed, "flow_normal", lambda g: torch.randn((), generator=g))
    uniform = per_sample(keys, opts.seed, "flow_uniform", lambda g: torch.rand((), generator=g))
    if velocity:
        sigmas = flux_sigmas(settings, normal, uniform, (latents.shape[-2], latents.shape[-1]))
    else:
        sigmas = sd3_sigmas(settings, normal, uniform, opts.min_timestep, opts.max_timestep)
    sigmas = sigmas.to(device)
    s = sigmas.view(-1, *[1] * (latents.ndim - 1)).to(latents.dtype)
    noised_with = noise
    if opts.ip_noise_gamma:
        extra = input_perturbation(keys, opts.seed, shape, opts.ip_noise_gamma, opts.ip_noise_gamma_random_strength)
        noised_with = noise + extra.to(device, latents.dtype)
    noisy = (1 - s) * latents + s * noised_with
    return FlowNoised(noise, noisy, sigmas, sigmas * NUM_TIMESTEPS)


def flow_latents(model: LoadedModel, batch: dict[str, Any], seed: int) -> torch.Tensor:
    """The batch's latents, shifted and scaled as the VAE's config says."""
    vae = model.vae
    raw = draw_latents(*latent_distribution(model, batch), batch["keys"], seed)
    shift = getattr(vae.config, "shift_factor", None) or 0.0
    return (raw - shift) * vae.config.scaling_factor


def flow_loss(predictor: nn.Module, model: LoadedModel, batch: dict[str, Any], opts: NoiseOptions,
              weight_dtype: torch.dtype) -> torch.Tensor:
    """Noise the batch's latents at random noise levels and score the model's output (the flow families' objective)."""
    settings: FlowSettings = getattr(model.family, "settings", FlowSettings())
    velocity = getattr(model.family, "flow_target", "velocity") == "velocity"
    device = next(p for p in model.unet.parameters()).device
    keys = batch["keys"]
    latents = flow_latents(model, batch, opts.seed).to(device, weight_dtype)
    noised = add_flow_noise(latents, keys, settings, opts, velocity)
    output = predictor(noised.noisy, noised.timesteps, *conditioning(batch, device))
    pred, target, weights = prediction_and_target(output, noised, latents, settings, velocity)
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
