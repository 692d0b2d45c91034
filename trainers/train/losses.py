"""How a prediction is scored: the loss type, the loss mask and the SNR-based weightings.

Formulas follow sd-scripts (library/train_util.py conditional_loss and get_huber_threshold_if_needed,
library/custom_train_functions.py).
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

SNR_CAP = 1000.0  # sd-scripts caps the SNR here where it divides by it (timestep 0 is almost noise-free)


def huber_thresholds(scheduler: Any, timesteps: torch.Tensor, schedule: str, c: float,
                     scale: float) -> torch.Tensor:
    """The Huber threshold of each sample, (B,), from its timestep."""
    if schedule == "exponential":
        alpha = -math.log(c) / scheduler.config.num_train_timesteps
        return torch.exp(-alpha * timesteps.float()) * scale
    if schedule == "snr":
        alphas = scheduler.alphas_cumprod.to(timesteps.device)[timesteps].float()
        sigmas = ((1.0 - alphas) / alphas) ** 0.5
        return (1 - c) / (1 + sigmas) ** 2 + c
    if schedule == "constant":
        return torch.full(timesteps.shape, c * scale, device=timesteps.device)
    raise ValueError(f"unknown huber_schedule {schedule!r}")


def elementwise_loss(pred: torch.Tensor, target: torch.Tensor, loss_type: str,
                     huber_c: torch.Tensor | None = None) -> torch.Tensor:
    """The loss of every element (no reduction): l2, l1, or pseudo-Huber with per-sample thresholds."""
    if loss_type == "l2":
        return F.mse_loss(pred, target, reduction="none")
    if loss_type == "l1":
        return F.l1_loss(pred, target, reduction="none")
    if loss_type not in ("huber", "smooth_l1") or huber_c is None:
        raise ValueError(f"loss_type {loss_type!r} needs per-sample Huber thresholds" if huber_c is None
                         else f"unknown loss_type {loss_type!r}")
    c = huber_c.to(pred.device, pred.dtype).view(-1, *([1] * (pred.ndim - 1)))
    smooth = torch.sqrt((pred - target) ** 2 + c**2) - c
    return 2 * smooth * (c if loss_type == "huber" else 1)


def apply_mask(loss: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    """Weight an element-wise loss (B, C, h, w) by masks (B, 1, H, W) in [0, 1], area-averaged down to (h, w)."""
    weights = F.interpolate(masks.to(loss.device, loss.dtype), size=loss.shape[2:], mode="area")
    return loss * weights


_ORIGINAL_ALPHAS: dict[str, torch.Tensor] = {}


def snr_alphas_cumprod(scheduler: Any) -> torch.Tensor:
    """The alphas_cumprod the SNR weightings use: the schedule's own, or before the zero-terminal-SNR
    rescale (sd-scripts computes its SNR table before rescaling, which also keeps it finite)."""
    if not scheduler.config.get("rescale_betas_zero_snr", False):
        return scheduler.alphas_cumprod
    key = repr(sorted(scheduler.config.items()))
    if key not in _ORIGINAL_ALPHAS:
        original = type(scheduler).from_config(scheduler.config, rescale_betas_zero_snr=False)
        _ORIGINAL_ALPHAS[key] = original.alphas_cumprod
    return _ORIGINAL_ALPHAS[key]


def snr(scheduler: Any, timesteps: torch.Tensor) -> torch.Tensor:
    alphas = snr_alphas_cumprod(scheduler).to(timesteps.device)[timesteps]
    return alphas / (1 - alphas)


def min_snr_weights(scheduler: Any, timesteps: torch.Tensor, gamma: float, prediction_type: str) -> torch.Tensor:
    """Min-SNR-gamma weighting (Hang et al. 2023), for epsilon or v targets."""
    ratio = snr(scheduler, timesteps)
    clipped = torch.clamp(ratio, max=gamma)
    return (clipped / (ratio + 1) if prediction_type == "v_prediction" else clipped / ratio).float()


def v_like_scale(scheduler: Any, timesteps: torch.Tensor) -> torch.Tensor:
    """SNR / (SNR + 1), the SNR capped at 1000: how a v loss compares with an epsilon loss."""
    capped = torch.clamp(snr(scheduler, timesteps), max=SNR_CAP)
    return (capped / (capped + 1)).float()


def debiased_weights(scheduler: Any, timesteps: torch.Tensor, prediction_type: str) -> torch.Tensor:
    """Debiased estimation (arXiv 2310.08442): 1/sqrt(SNR), or 1/(SNR + 1) for v; the SNR capped at 1000."""
    capped = torch.clamp(snr(scheduler, timesteps), max=SNR_CAP)
    return (1 / (capped + 1) if prediction_type == "v_prediction" else 1 / torch.sqrt(capped)).float()


def zero_terminal_snr_scheduler(scheduler: Any) -> Any:
    """The same schedule with its betas rescaled to zero terminal SNR (arXiv 2305.08891, as sd-scripts'
    fix_noise_scheduler_betas_for_zero_terminal_snr); a config field, so inference schedulers built
    from this config (sample images) follow it."""
    # A keyword, not a merged dict: from_config resets the keys listed in `_use_default_values`.
    return type(scheduler).from_config(scheduler.config, rescale_betas_zero_snr=True)
