"""What a LoRA learns besides denoising its images, with the base model's own predictions (the LoRA turned off) as
targets:

- a slider (LECO, ai-toolkit's concept sliders): at weight +s the LoRA's prediction for the caption becomes the
  base's plus s x slider_strength x (positive prompt's - negative prompt's prediction); each step trains one
  weight, +1 and -1 in turn, so -1 moves the other way;
- preservation without class images (ai-toolkit's differential output preservation): beside the usual loss, the
  LoRA's prediction for the caption without its trigger is pulled toward the base model's, weighted by
  preservation_weight. Both predictions share one forward pass (one DDP forward a step).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.core.options import TrainConfig
from trainers.models import LoadedModel
from trainers.train.conditioning import conditioning
from trainers.train.diffusion import NoiseOptions, Noised, add_training_noise, diffusion_loss, sample_latents, score
from trainers.train.latents import latent_distribution


@contextlib.contextmanager
def lora_weight(network: Any, weight: float) -> Iterator[None]:
    network.set_multiplier(weight)
    try:
        yield
    finally:
        network.set_multiplier(1.0)


def noised_images(model: LoadedModel, batch: dict[str, Any], opts: NoiseOptions, weight_dtype: torch.dtype
                  ) -> tuple[Tensor, Noised]:
    """(latents, noised) of the batch's images, as the denoising loss draws them (same keys, same noise)."""
    device = next(model.unet.parameters()).device
    mean, std = latent_distribution(model, batch)
    latents = sample_latents(mean, std, batch["keys"], opts.seed, model.vae.config.scaling_factor)
    latents = latents.to(device, weight_dtype)
    return latents, add_training_noise(latents, batch["keys"], model.noise_scheduler, opts)


def _unwrapped(predictor: nn.Module) -> nn.Module:
    return getattr(predictor, "module", predictor)  # DDP's: the base predictions need no gradient, no reduction


def _check_family(model: LoadedModel, option: str) -> None:
    if model.family.objective == "flow":
        raise ConfigError([ConfigIssue(option, f"is for SD1.x/2.x and SDXL models; {model.family.title} is not "
                                       "trained with it", "objective")])


class Slider:
    def __init__(self, cfg: TrainConfig, network: Any, model: LoadedModel) -> None:
        _check_family(model, "slider_positive")
        self.prompts = [cfg.slider_positive.strip(), cfg.slider_negative.strip()]
        self.strength, self.network, self.clip_skip = cfg.slider_strength, network, cfg.clip_skip
        self.calls = 0

    def __call__(self, predictor: nn.Module, model: LoadedModel, batch: dict[str, Any], opts: NoiseOptions,
                 weight_dtype: torch.dtype) -> Tensor:
        _, noised = noised_images(model, batch, opts, weight_dtype)
        device = noised.noisy.device
        input_ids, sizes, embeds = conditioning(batch, device)
        rows = noised.noisy.shape[0]
        base = _unwrapped(predictor)
        with torch.no_grad(), lora_weight(self.network, 0.0):
            neutral = base(noised.noisy, noised.timesteps, input_ids, sizes, embeds)
            hidden, pooled = model.encode_texts(self.prompts, self.clip_skip)
            ends = [base(noised.noisy, noised.timesteps, None, sizes,
                         (hidden[i:i + 1].expand(rows, -1, -1).to(device),
                          None if pooled is None else pooled[i:i + 1].expand(rows, -1).to(device)))
                    for i in range(2)]
        sign = 1.0 if self.calls % 2 == 0 else -1.0
        self.calls += 1
        target = neutral + sign * self.strength * (ends[0] - ends[1])
        with lora_weight(self.network, sign):
            pred = predictor(noised.noisy, noised.timesteps, input_ids, sizes, embeds)
        return score(pred, target, noised.timesteps, model.noise_scheduler, opts, batch.get("masks"),
                     batch.get("loss_weights"))


class Preservation:
    def __init__(self, cfg: TrainConfig, network: Any, model: LoadedModel) -> None:
        _check_family(model, "preservation_weight")
        self.weight, self.network = cfg.preservation_weight, network
        self.trigger = [_ids(t, cfg.preservation_trigger) for t in model.tokenizers]
        self.replacement = [_ids(t, cfg.preservation_class) for t in model.tokenizers]

    def __call__(self, predictor: nn.Module, model: LoadedModel, batch: dict[str, Any], opts: NoiseOptions,
                 weight_dtype: torch.dtype) -> Tensor:
        latents, noised = noised_images(model, batch, opts, weight_dtype)
        device = latents.device
        input_ids, sizes, _ = conditioning(batch, device)
        preserved = [torch.stack([_replaced(row, trigger, new) for row in ids])
                     for ids, trigger, new in zip(input_ids, self.trigger, self.replacement)]
        with torch.no_grad(), lora_weight(self.network, 0.0):
            prior = _unwrapped(predictor)(noised.noisy, noised.timesteps, preserved, sizes)
        both = predictor(torch.cat([noised.noisy] * 2), torch.cat([noised.timesteps] * 2),
                         [torch.cat(pair) for pair in zip(input_ids, preserved)], _twice(sizes))
        pred, kept = both.chunk(2)
        target = noised.noise if opts.prediction_type != "v_prediction" else \
            model.noise_scheduler.get_velocity(latents, noised.noise, noised.timesteps)
        scored = [score(p, t, noised.timesteps, model.noise_scheduler, opts, batch.get("masks"),
                        batch.get("loss_weights")) for p, t in ((pred, target), (kept, prior))]
        return scored[0] + self.weight * scored[1]


def _ids(tokenizer: Any, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False).input_ids if text.strip() else []


def _replaced(row: Tensor, trigger: list[int], new: list[int]) -> Tensor:
    """A caption's token ids with every `trigger` run replaced by `new`, kept at its length (padded with its last
    id: the padding, or the end token of a full caption)."""
    ids, out, i = row.tolist(), [], 0
    while i < len(ids):
        if trigger and ids[i:i + len(trigger)] == trigger:
            out += new
            i += len(trigger)
        else:
            out.append(ids[i])
            i += 1
    out = out[:len(ids) - 1] + [ids[-1]] if len(out) >= len(ids) else out + [ids[-1]] * (len(ids) - len(out))
    return torch.tensor(out, dtype=row.dtype, device=row.device)


def _twice(sizes: Any) -> Any:
    return replace(sizes, **{f: torch.cat([getattr(sizes, f)] * 2) for f in ("original_size", "crop_top_left",
                                                                           "target_size")})


def objective_for(cfg: TrainConfig, network: Any, model: LoadedModel) -> Any:
    """The LoRA's objective: a slider's, preservation's, or the images' denoising alone."""
    if cfg.slider_positive.strip():
        return Slider(cfg, network, model)
    if cfg.preservation_weight > 0:
        return Preservation(cfg, network, model)
    return diffusion_loss
