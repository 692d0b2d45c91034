"""HiDream-O1-Image's samples: a flow-matching Euler loop with classifier-free guidance over its pixel patches
(diffusers 0.42.1 has no HiDream-O1 pipeline; musubi-tuner's samples step FlowUniPC, full, or its flash scheduler,
dev), taking the token ids the trainer encodes. It answers the calls samples, Generate and the compare grid make of a
pipeline: the images come back as the 'latents' (B, 3, H, W) in [-1, 1], which the family's decode_latents passes on."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainers.models.hidream_o1.model import PATCH, patchify, unpatchify
from trainers.models.pipeline_lora import TransformerLoraLoading

SIGMA_FLOOR = 1e-3  # the reference's T_EPS: the velocity's sigma never below it


class HiDreamO1Pipeline(TransformerLoraLoading):
    """The denoiser and a FlowMatchEulerDiscreteScheduler; the start noise noise_scale x N(0, 1)."""

    def __init__(self, transformer: nn.Module, scheduler: Any, noise_scale: float) -> None:
        from diffusers.image_processor import VaeImageProcessor

        self.transformer, self.scheduler, self.noise_scale = transformer, scheduler, noise_scale
        self.image_processor = VaeImageProcessor(vae_scale_factor=1)  # what samples' PNGs are made with

    def set_progress_bar_config(self, **kwargs: Any) -> None:
        """No progress bar is drawn."""

    @torch.no_grad()
    def __call__(self, *, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, negative_ids: torch.Tensor,
                 negative_mask: torch.Tensor, width: int, height: int, num_inference_steps: int,
                 guidance_scale: float, generator: torch.Generator | list[torch.Generator],
                 output_type: str = "latent", **unused: Any) -> tuple[torch.Tensor]:
        """Images (B, 3, H, W) in [-1, 1] for the prompts' ids (B of each), one per generator."""
        assert output_type == "latent", "the family passes the images on itself (decode_latents)"
        weight = next(self.transformer.parameters())
        height, width = height // PATCH * PATCH, width // PATCH * PATCH
        generators = generator if isinstance(generator, list) else [generator]
        z = torch.cat([torch.randn((1, 3, height, width), generator=g, dtype=torch.float32) for g in generators])
        z = patchify(z.to(weight.device) * self.noise_scale)
        self.scheduler.set_timesteps(num_inference_steps, device=weight.device)
        guided = guidance_scale > 1.0
        ids, mask = (_stacked(negative_ids, prompt_ids), _stacked(negative_mask, prompt_mask)) if guided else \
            (prompt_ids, prompt_mask)
        grid = (height // PATCH, width // PATCH)
        for t in self.scheduler.timesteps:
            sigma = t.float() / 1000
            batch = z.repeat(2 if guided else 1, 1, 1)
            x = self.transformer(ids.to(weight.device), mask.to(weight.device), batch.to(weight.dtype), grid,
                                 (1 - sigma).expand(batch.shape[0]).to(weight.device)).float()
            velocity = (batch - x) / sigma.clamp_min(SIGMA_FLOOR)  # d z / d sigma
            if guided:
                uncond, cond = velocity.chunk(2)
                velocity = uncond + guidance_scale * (cond - uncond)
            z = self.scheduler.step(velocity, t, z).prev_sample
        return (unpatchify(z, height, width),)


def _stacked(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Two batches of token rows as one, the shorter padded (with zeros, masked out) to the longer."""
    length = max(first.shape[1], second.shape[1])
    pad = [torch.nn.functional.pad(x, (0, length - x.shape[1])) for x in (first, second)]
    return torch.cat(pad)
