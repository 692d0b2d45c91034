"""Anima's samples: the flow-matching Euler loop with classifier-free guidance that ComfyUI and diffusers' modular
AnimaModularPipeline run (diffusers 0.42.1 has no DiffusionPipeline for it), taking the prompt embeddings the
trainer encodes. It answers the calls samples, Generate and the compare grid make of a pipeline."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainers.models.pipeline_lora import TransformerLoraLoading

T5_PAD = 0  # T5's pad id


class AnimaPipeline(TransformerLoraLoading):
    """The transformer (with its LLM adapter) and a FlowMatchEulerDiscreteScheduler; latents in the autoencoder's
    grid (B, 16, h, w), normalised as the transformer reads them."""

    def __init__(self, transformer: nn.Module, scheduler: Any, vae_scale: int) -> None:
        from diffusers.image_processor import VaeImageProcessor

        self.transformer, self.scheduler, self.vae_scale = transformer, scheduler, vae_scale
        self.image_processor = VaeImageProcessor(vae_scale_factor=vae_scale)  # what samples' PNGs are made with

    def set_progress_bar_config(self, **kwargs: Any) -> None:
        """No progress bar is drawn."""

    @torch.no_grad()
    def __call__(self, *, prompt_embeds: torch.Tensor, text_mask: torch.Tensor, t5_ids: torch.Tensor,
                 negative_prompt_embeds: torch.Tensor, negative_text_mask: torch.Tensor,
                 negative_t5_ids: torch.Tensor, width: int, height: int, num_inference_steps: int,
                 guidance_scale: float, generator: torch.Generator | list[torch.Generator],
                 output_type: str = "latent", **unused: Any) -> tuple[torch.Tensor]:
        """Latents (B, 16, h, w) of the prompts' embeddings (B of each, as encoded), one image per generator."""
        assert output_type == "latent", "the family decodes the latents itself (decode_latents)"
        weight = next(self.transformer.parameters())
        shape = (1, self.transformer.config.out_channels, height // self.vae_scale, width // self.vae_scale)
        generators = generator if isinstance(generator, list) else [generator]
        latents = torch.cat([torch.randn(shape, generator=g, dtype=torch.float32) for g in generators])
        latents = latents.to(weight.device)
        self.scheduler.set_timesteps(num_inference_steps, device=weight.device)
        guided = guidance_scale > 1.0
        texts = (torch.cat([negative_prompt_embeds, prompt_embeds]), torch.cat([negative_text_mask, text_mask]),
                 torch.cat([negative_t5_ids, t5_ids])) if guided else (prompt_embeds, text_mask, t5_ids)
        for t in self.scheduler.timesteps:
            batch = latents.repeat(2 if guided else 1, 1, 1, 1).to(weight.dtype)
            sigma = (t / 1000).expand(batch.shape[0]).to(weight.dtype)
            hidden, mask, ids = texts
            velocity = self.transformer(batch.unsqueeze(2), sigma, hidden.to(weight.dtype), text_mask=mask,
                                        t5_ids=ids, t5_mask=ids != T5_PAD)[0].squeeze(2).float()
            if guided:
                uncond, cond = velocity.chunk(2)
                velocity = uncond + guidance_scale * (cond - uncond)
            latents = self.scheduler.step(velocity, t, latents).prev_sample
        return (latents,)
