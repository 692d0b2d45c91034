"""The diffusion training objective, shared by every method and family."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainers.data.dataset import sample_generator
from trainers.models import LoadedModel, SizeConditioning


class NoisePredictor(nn.Module):
    """Text encoders + UNet (+ the trained extra, e.g. a LoRA network) as one module.

    This is the module wrapped for distributed training, so one DDP forward covers everything
    that is trained and gradients are reduced in DDP's large buckets.
    """

    def __init__(self, model: LoadedModel, extra: nn.Module | None, clip_skip: int, train_text_encoder: bool,
                 text_encoders_cached: bool = False) -> None:
        super().__init__()
        self.family = model.family
        self.unet = model.unet
        # With cached text-encoder outputs the encoders stay out (and off the accelerator).
        self.text_encoders = nn.ModuleList([] if text_encoders_cached else model.text_encoders)
        self.extra = extra
        self.clip_skip = clip_skip
        self.train_text_encoder = train_text_encoder
        # Frozen weights take no part in DDP: not broadcast at start, not bucketed.
        self._ddp_params_and_buffers_to_ignore = [n for n, p in self.named_parameters() if not p.requires_grad] + [
            n for n, _ in self.named_buffers()]

    def forward(self, noisy_latents: torch.Tensor, timesteps: torch.Tensor, input_ids: list[torch.Tensor] | None,
                sizes: SizeConditioning, embeds: tuple[torch.Tensor, torch.Tensor | None] | None = None,
                ) -> torch.Tensor:
        """`embeds`: cached text-encoder outputs (hidden states, pooled) instead of `input_ids`."""
        if embeds is not None:
            hidden, pooled = embeds
        else:
            with torch.set_grad_enabled(self.train_text_encoder and torch.is_grad_enabled()):
                hidden, pooled = self.family.encode_prompts(list(self.text_encoders), input_ids, self.clip_skip)
        kwargs = self.family.unet_kwargs(pooled, sizes)
        return self.unet(noisy_latents, timesteps, hidden.to(noisy_latents.dtype), **kwargs).sample


@dataclass
class NoiseOptions:
    seed: int
    noise_offset: float
    min_snr_gamma: float | None
    prediction_type: str  # "epsilon" or "v_prediction"


def _per_sample(keys: torch.Tensor, seed: int, stream: str, draw) -> torch.Tensor:
    return torch.stack([draw(sample_generator(seed, int(e), int(i), stream)) for e, i in keys.tolist()])


@torch.no_grad()
def encode_latents(vae: nn.Module, pixels: torch.Tensor, keys: torch.Tensor, seed: int) -> torch.Tensor:
    dist = vae.encode(pixels.to(vae.device, vae.dtype)).latent_dist
    return sample_latents(dist.mean, dist.std, keys, seed, vae.config.scaling_factor)


def sample_latents(mean: torch.Tensor, std: torch.Tensor, keys: torch.Tensor, seed: int,
                   scaling_factor: float) -> torch.Tensor:
    """A latent drawn from the VAE's distribution with per-sample noise (cached or fresh, the same draw)."""
    eps = _per_sample(keys, seed, "latent", lambda g: torch.randn(mean.shape[1:], generator=g))
    return (mean + std * eps.to(mean.device, mean.dtype)) * scaling_factor


def diffusion_loss(predictor: nn.Module, model: LoadedModel, batch: dict[str, Any], opts: NoiseOptions,
                   weight_dtype: torch.dtype) -> torch.Tensor:
    """Noise the batch's latents at random timesteps and score the model's prediction."""
    device = next(p for p in model.unet.parameters()).device
    keys = batch["keys"]
    if "latent_mean" in batch:
        latents = sample_latents(batch["latent_mean"], batch["latent_std"], keys, opts.seed,
                                 model.vae.config.scaling_factor).to(device, weight_dtype)
    else:
        latents = encode_latents(model.vae, batch["pixels"], keys, opts.seed).to(device, weight_dtype)
    shape = latents.shape[1:]
    num_t = model.noise_scheduler.config.num_train_timesteps
    noise = _per_sample(keys, opts.seed, "noise", lambda g: torch.randn(shape, generator=g))
    if opts.noise_offset:
        noise += opts.noise_offset * _per_sample(keys, opts.seed, "offset", lambda g: torch.randn(shape[0], 1, 1, generator=g))
    timesteps = _per_sample(keys, opts.seed, "timestep", lambda g: torch.randint(0, num_t, (), generator=g))
    noise, timesteps = noise.to(device, latents.dtype), timesteps.to(device)

    noisy = model.noise_scheduler.add_noise(latents, noise, timesteps)
    if opts.prediction_type == "v_prediction":
        target = model.noise_scheduler.get_velocity(latents, noise, timesteps)
    else:
        target = noise
    sizes = SizeConditioning(batch["original_size"], batch["crop_top_left"], batch["target_size"])
    input_ids = [ids.to(device) for ids in batch["input_ids"]] if "input_ids" in batch else None
    embeds = None
    if "prompt_embeds" in batch:
        pooled = batch.get("pooled_embeds")
        embeds = (batch["prompt_embeds"].to(device), None if pooled is None else pooled.to(device))
    pred = predictor(noisy, timesteps, input_ids, sizes, embeds)
    loss = F.mse_loss(pred.float(), target.float(), reduction="none").mean(dim=(1, 2, 3))
    if opts.min_snr_gamma:
        loss = loss * min_snr_weights(model.noise_scheduler, timesteps, opts.min_snr_gamma, opts.prediction_type)
    if "loss_weights" in batch:  # regularization images (prior_loss_weight) and padding samples (0)
        loss = loss * batch["loss_weights"].to(loss.device)
    return loss.mean()


def min_snr_weights(scheduler: Any, timesteps: torch.Tensor, gamma: float, prediction_type: str) -> torch.Tensor:
    """Min-SNR-gamma weighting (Hang et al. 2023), for epsilon or v targets."""
    alphas = scheduler.alphas_cumprod.to(timesteps.device)[timesteps]
    snr = alphas / (1 - alphas)
    clipped = torch.clamp(snr, max=gamma)
    return (clipped / (snr + 1) if prediction_type == "v_prediction" else clipped / snr).float()
