"""The diffusion training objective, shared by every method and family."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import nn

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.core.options import TrainConfig
from trainers.core.options.typed import LossOptions, OptimizerOptions
from trainers.data.prompt_chunks import WeightedIds, split_weighted
from trainers.models import LoadedModel, SizeConditioning
from trainers.train import memo
from trainers.train.conditioning import conditioning
from trainers.train.latents import draw_latents, latent_distribution
from trainers.train.losses import (
    apply_mask,
    debiased_weights,
    elementwise_loss,
    huber_thresholds,
    min_snr_weights,
    v_like_scale,
)
from trainers.train.noise import draw_timesteps, input_perturbation, multires_noise, offset_noise, per_sample


class NoisePredictor(nn.Module):
    """Text encoders + UNet (+ the trained extra, e.g. a LoRA network) as one module.

    This is the module wrapped for distributed training, so one DDP forward covers everything
    that is trained and gradients are reduced in DDP's large buckets.
    """

    def __init__(self, model: LoadedModel, extra: nn.Module | None, clip_skip: int, train_text_encoder: bool,
                 text_encoders_cached: bool = False, memoize: bool = True) -> None:
        super().__init__()
        self.family = model.family
        self.unet = model.unet
        # With cached text-encoder outputs the encoders stay out (and off the accelerator).
        self.text_encoders = nn.ModuleList([] if text_encoders_cached else model.text_encoders)
        self.extra = extra
        self.clip_skip = clip_skip
        self.train_text_encoder = train_text_encoder
        frozen = bool(self.text_encoders) and not train_text_encoder
        deterministic = all(memo.deterministic(te) for te in self.text_encoders)
        self.text_memo = memo.RowMemo(memo.TEXT_BYTES) if memoize and frozen and deterministic else None
        # Frozen weights take no part in DDP: not broadcast at start, not bucketed.
        self._ddp_params_and_buffers_to_ignore = [n for n, p in self.named_parameters() if not p.requires_grad] + [
            n for n, _ in self.named_buffers()]

    def train(self, mode: bool = True) -> "NoisePredictor":
        """Train mode for what trains; frozen text encoders stay in eval mode (their dropout off)."""
        super().train(mode)
        if not self.train_text_encoder:
            self.text_encoders.eval()
        return self

    def forward(self, noisy_latents: torch.Tensor, timesteps: torch.Tensor,
                input_ids: list[torch.Tensor] | list[WeightedIds] | None, sizes: SizeConditioning,
                embeds: tuple[torch.Tensor, torch.Tensor | None] | None = None) -> torch.Tensor:
        """`input_ids`: per tokenizer, the batch's ids (with weighted captions, WeightedIds: ids and token
        weights); `embeds`: cached text-encoder outputs (hidden states, pooled) instead."""
        if embeds is not None:
            hidden, pooled = embeds
        else:
            ids, weights = split_weighted(input_ids or [])
            with torch.set_grad_enabled(self.train_text_encoder and torch.is_grad_enabled()):
                def encode(rows: memo.Select) -> tuple[torch.Tensor, torch.Tensor | None]:
                    return self._encode([t[rows] for t in ids], memo.rows_of(weights, rows))

                hidden, pooled = self.text_memo(encode, memo.text_keys(ids, weights)) if self.text_memo \
                    else self._encode(ids, weights)
        return self.family.denoise(self.unet, noisy_latents, timesteps, hidden, pooled, sizes)

    def _encode(self, ids: list[torch.Tensor], weights: list[torch.Tensor] | None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.family.encode_prompts(list(self.text_encoders), ids, self.clip_skip, weights)


@dataclass
class NoiseOptions:
    """What the objective needs of the config (the loss group's options) and of the model."""

    seed: int
    noise_offset: float
    min_snr_gamma: float | None
    prediction_type: str  # "epsilon" or "v_prediction"
    loss_type: str = "l2"
    huber_schedule: str = "snr"
    huber_c: float = 0.1
    huber_scale: float = 1.0
    min_timestep: int | None = None
    max_timestep: int | None = None
    multires_noise_iterations: int = 0  # 0 unless noise_offset_type is 'Multires'
    multires_noise_discount: float = 0.3
    adaptive_noise_scale: float | None = None
    noise_offset_random_strength: bool = False
    ip_noise_gamma: float = 0.0
    ip_noise_gamma_random_strength: bool = False
    debiased_estimation_loss: bool = False
    scale_v_pred_loss_like_noise_pred: bool = False
    v_pred_like_loss: float = 0.0

    def __post_init__(self) -> None:
        # Validation saw only v_parameterization; a model can predict v by itself (SD2 768-v).
        v = self.prediction_type == "v_prediction"
        issues = []
        if self.scale_v_pred_loss_like_noise_pred and not v:
            issues.append(ConfigIssue("scale_v_pred_loss_like_noise_pred", "works with v-prediction only, and this "
                                      "model predicts epsilon (noise): turn it off", "loss"))
        if self.v_pred_like_loss and v:
            issues.append(ConfigIssue("v_pred_like_loss", "is for epsilon-prediction models, and this model predicts "
                                      "v: set v_pred_like_loss = 0", "loss"))
        if issues:
            raise ConfigError(issues)

    @classmethod
    def from_config(cls, cfg: TrainConfig, prediction_type: str) -> "NoiseOptions":
        """The options of a run's config (a TrainConfig) for a model predicting `prediction_type`."""
        names = [f.name for f in fields(cls) if f.name not in ("seed", "prediction_type", "multires_noise_iterations")]
        loss = LossOptions.of(cfg)
        multires = loss.multires_noise_iterations if loss.noise_offset_type == "Multires" else 0
        return cls(seed=OptimizerOptions.of(cfg).seed, prediction_type=prediction_type, multires_noise_iterations=multires,
                   **{name: cfg.values[name] for name in names})


_per_sample = per_sample  # the name tests and callers have used


def sample_latents(mean: torch.Tensor, std: torch.Tensor, keys: torch.Tensor, seed: int,
                   scaling_factor: float) -> torch.Tensor:
    """A latent drawn from the VAE's distribution with per-sample noise, scaled for the denoiser."""
    return draw_latents(mean, std, keys, seed) * scaling_factor


@dataclass
class Noised:
    noise: torch.Tensor  # what an epsilon model predicts (offset and multires included; input perturbation not)
    noisy: torch.Tensor  # the model's input
    timesteps: torch.Tensor


def add_training_noise(latents: torch.Tensor, keys: torch.Tensor, scheduler: Any, opts: NoiseOptions) -> Noised:
    """Noise each sample's latents at its timestep, as sd-scripts' get_noise_noisy_latents_and_timesteps does."""
    device, shape = latents.device, latents.shape[1:]
    noise = per_sample(keys, opts.seed, "noise", lambda g: torch.randn(shape, generator=g)).to(device)
    if opts.noise_offset:
        noise = noise + offset_noise(latents, keys, opts.seed, opts.noise_offset, opts.noise_offset_random_strength,
                                     opts.adaptive_noise_scale)
    if opts.multires_noise_iterations:
        noise = multires_noise(noise, keys, opts.seed, opts.multires_noise_iterations, opts.multires_noise_discount)
    num_t = scheduler.config.num_train_timesteps
    low = opts.min_timestep or 0
    high = num_t if opts.max_timestep is None else opts.max_timestep
    timesteps = draw_timesteps(keys, opts.seed, low, high).to(device)
    noise = noise.to(latents.dtype)
    noised_with = noise
    if opts.ip_noise_gamma:
        extra = input_perturbation(keys, opts.seed, shape, opts.ip_noise_gamma, opts.ip_noise_gamma_random_strength)
        noised_with = noise + extra.to(device, latents.dtype)
    return Noised(noise, scheduler.add_noise(latents, noised_with, timesteps), timesteps)


def diffusion_loss(predictor: nn.Module, model: LoadedModel, batch: dict[str, Any], opts: NoiseOptions,
                   weight_dtype: torch.dtype) -> torch.Tensor:
    """Noise the batch's latents at random timesteps and score the model's prediction."""
    if model.family.objective == "flow":
        from trainers.train.flow import flow_loss

        return flow_loss(predictor, model, batch, opts, weight_dtype)
    device = next(p for p in model.unet.parameters()).device
    keys = batch["keys"]
    mean, std = latent_distribution(model, batch)
    latents = sample_latents(mean, std, keys, opts.seed, model.vae.config.scaling_factor).to(device, weight_dtype)
    scheduler = model.noise_scheduler
    noised = add_training_noise(latents, keys, scheduler, opts)
    timesteps = noised.timesteps
    if opts.prediction_type == "v_prediction":
        target = scheduler.get_velocity(latents, noised.noise, timesteps)
    else:
        target = noised.noise
    pred = predictor(noised.noisy, timesteps, *conditioning(batch, device))
    return score(pred, target, timesteps, scheduler, opts, batch.get("masks"), batch.get("loss_weights"))


def score(pred: torch.Tensor, target: torch.Tensor, timesteps: torch.Tensor, scheduler: Any, opts: NoiseOptions,
          masks: torch.Tensor | None = None, loss_weights: torch.Tensor | None = None) -> torch.Tensor:
    """The batch's loss, in sd-scripts' order: element-wise loss, mask, mean per sample, sample weights,
    SNR weightings, mean."""
    huber_c = None
    if opts.loss_type in ("huber", "smooth_l1"):
        huber_c = huber_thresholds(scheduler, timesteps, opts.huber_schedule, opts.huber_c, opts.huber_scale)
    loss = elementwise_loss(pred.float(), target.float(), opts.loss_type, huber_c)
    if masks is not None:
        loss = apply_mask(loss, masks)
    loss = loss.mean(dim=tuple(range(1, loss.ndim)))
    if loss_weights is not None:  # regularization images (prior_loss_weight) and padding samples (0)
        loss = loss * loss_weights.to(loss.device)
    if opts.min_snr_gamma:
        loss = loss * min_snr_weights(scheduler, timesteps, opts.min_snr_gamma, opts.prediction_type)
    if opts.scale_v_pred_loss_like_noise_pred:
        loss = loss * v_like_scale(scheduler, timesteps)
    if opts.v_pred_like_loss:
        loss = loss + loss / v_like_scale(scheduler, timesteps) * opts.v_pred_like_loss
    if opts.debiased_estimation_loss:
        loss = loss * debiased_weights(scheduler, timesteps, opts.prediction_type)
    return loss.mean()

