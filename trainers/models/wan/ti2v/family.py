"""Wan 2.2 TI2V 5B trained as text-to-video (diffusers WanPipeline with expand_timesteps): Wan 2.1's training
(trainers/models/wan/family.py) over its 48-channel autoencoder. With expand_timesteps the pipeline gives the
transformer one timestep per token; in text-to-video every token's is the step's own, which is what the transformer
computes from one timestep per sample (its condition embedder broadcasts it), so training passes one per sample.
Samples render through WanPipeline(expand_timesteps=True) at 24 fps."""
from __future__ import annotations

from typing import Any

from trainers.models.base import LoadedModel
from trainers.models.wan.family import Wan
from trainers.models.wan.ti2v.rules import WanTI2VRules


class WanTI2V(WanTI2VRules, Wan):
    implementation = "https://github.com/Wan-Video/Wan2.2"

    def scheduler_config(self) -> dict[str, Any]:
        return {"shift": 5.0}  # Wan 2.2 TI2V 5B's sampling shift (Wan-AI's config)

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        from diffusers import WanPipeline

        return WanPipeline(tokenizer=model.tokenizers[0], text_encoder=model.text_encoders[0], vae=model.vae,
                           scheduler=scheduler, transformer=model.unet, expand_timesteps=True)


WAN22_TI2V = WanTI2V()
