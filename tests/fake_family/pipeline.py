"""The fake family's sample pipeline: what trainers/sampling/pipeline.py calls of a diffusers pipeline (embeddings
in, latents out with output_type="latent", an image processor for the decoded pixels), over the model's own modules
so LoRA hooks and trained weights apply. Classifier-free guidance with the scheduler it is given, as diffusers'."""
from __future__ import annotations

from typing import Any

import torch

LATENT = 4  # latent channels (family.py's)
SCALE = 8  # image pixels per latent pixel, each side


class FakePipeline:
    def __init__(self, denoiser: torch.nn.Module, scheduler: Any) -> None:
        from diffusers.image_processor import VaeImageProcessor

        self.denoiser, self.scheduler = denoiser, scheduler
        self.image_processor = VaeImageProcessor(vae_scale_factor=SCALE)

    def set_progress_bar_config(self, **options: Any) -> None:
        """It shows no progress bar."""

    def __call__(self, prompt_embeds: torch.Tensor, negative_prompt_embeds: torch.Tensor, width: int, height: int,
                 num_inference_steps: int, guidance_scale: float, generator: torch.Generator,
                 output_type: str = "latent") -> Any:
        if output_type != "latent":
            raise ValueError("the fake pipeline returns latents only (the sampler decodes them)")
        param = next(self.denoiser.parameters())
        shape = (1, LATENT, height // SCALE, width // SCALE)
        latents = torch.randn(shape, generator=generator).to(param.device) * self.scheduler.init_noise_sigma
        self.scheduler.set_timesteps(num_inference_steps, device=param.device)
        text = torch.cat([negative_prompt_embeds, prompt_embeds]).to(param.device)
        for t in self.scheduler.timesteps:
            both = self.scheduler.scale_model_input(torch.cat([latents, latents]), t)
            uncond, cond = self.denoiser(both, t.expand(2), text).chunk(2)
            guided = uncond + guidance_scale * (cond - uncond)
            latents = self.scheduler.step(guided, t, latents, generator=generator).prev_sample
        from diffusers.pipelines.pipeline_utils import ImagePipelineOutput

        return ImagePipelineOutput(images=latents)  # read as .images or [0], as diffusers' outputs are
