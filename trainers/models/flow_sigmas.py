"""The noise levels (sigmas) flow families train at, with sd-scripts' meanings (library/flux_train_utils.py,
library/sd3_train_utils.py) of timestep_sampling, discrete_flow_shift, weighting_scheme and training_shift.

Each draw reads one standard normal and one uniform number per sample (trainers/train/noise.py draws them from the
sample's own seed), so batch splits train alike. A family picks its sampler with FlowFamily.draw_sigmas.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import torch

from trainers.core.options.training import in_group

_DEFAULTS = {o.name: o.default for o in in_group("flow")}
T5_DTYPES = {"float32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}  # t5xxl_dtype's ('auto': none)

NUM_TIMESTEPS = 1000


@dataclass(frozen=True)
class FlowSettings:
    """The flow-matching options of a run (their help in docs/options.md says what they mean)."""

    timestep_sampling: str = _DEFAULTS["timestep_sampling"]
    sigmoid_scale: float = _DEFAULTS["sigmoid_scale"]
    discrete_flow_shift: float = _DEFAULTS["discrete_flow_shift"]
    model_prediction_type: str = _DEFAULTS["model_prediction_type"]
    guidance_scale: float = _DEFAULTS["guidance_scale"]
    weighting_scheme: str = _DEFAULTS["weighting_scheme"]
    logit_mean: float = _DEFAULTS["logit_mean"]
    logit_std: float = _DEFAULTS["logit_std"]
    mode_scale: float = _DEFAULTS["mode_scale"]
    training_shift: float = _DEFAULTS["training_shift"]
    text_encoder_max_tokens: int | None = _DEFAULTS["text_encoder_max_tokens"]
    apply_t5_attn_mask: bool = _DEFAULTS["apply_t5_attn_mask"]
    apply_lg_attn_mask: bool = _DEFAULTS["apply_lg_attn_mask"]
    t5xxl_dtype: str = _DEFAULTS["t5xxl_dtype"]

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "FlowSettings":
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})

    @property
    def t5_dtype(self) -> torch.dtype | None:
        """The dtype T5-XXL runs in (t5xxl_dtype); None: the one it was loaded in, under the run's autocast."""
        return T5_DTYPES.get(self.t5xxl_dtype)


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
    """Noise levels (B,) by timestep_sampling (sd-scripts' get_noisy_model_input_and_timesteps of FLUX.1 and Chroma;
    musubi-tuner's has the same meanings)."""
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
