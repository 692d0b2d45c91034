"""Wan 2.2 TI2V 5B trained as text-to-video (diffusers WanPipeline with expand_timesteps): Wan 2.1's training
(trainers/models/wan/family.py) over its 48-channel autoencoder. With expand_timesteps the pipeline gives the
transformer one timestep per token; in text-to-video every token's is the step's own, which is what the transformer
computes from one timestep per sample (its condition embedder broadcasts it), so training passes one per sample.
Samples render through WanPipeline(expand_timesteps=True) at 24 fps. With ti2v_first_frame it trains as
image-to-video (first_frame.py) and samples through WanImageToVideoPipeline from each prompt's --ci first frame."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, SizeConditioning
from trainers.models.wan.family import Wan
from trainers.models.wan.ti2v.first_frame import FirstFrameSlot, conditioned_inputs, first_frame_objective
from trainers.models.wan.ti2v.rules import WanTI2VRules


class WanTI2V(WanTI2VRules, Wan):
    implementation = "https://github.com/Wan-Video/Wan2.2"
    first_frame = False  # ti2v_first_frame: trained as image-to-video (first_frame.py)
    slot = FirstFrameSlot()

    def configured(self, values: Mapping[str, Any]) -> Any:
        clone = super().configured(values)
        clone.first_frame = bool(values.get("ti2v_first_frame"))
        clone.slot = FirstFrameSlot()  # the run's own
        return clone

    def adapt_trainable(self, cfg: Any, session: Any, trainable: Any) -> Any:
        if not self.first_frame:
            return trainable
        return dataclasses.replace(trainable, objective=first_frame_objective(trainable.objective, self, self.slot))

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                text_mask: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """Image-to-video: the clean first latent frame in, its tokens at timestep 0 (the frames after it at the
        step's); text-to-video: Wan 2.1's call."""
        if self.slot.first is None:
            return super().denoise(unet, noisy, timesteps, hidden, text_mask, sizes)
        model_input, per_token = conditioned_inputs(noisy, timesteps, self.slot.first, unet.config.patch_size)
        return unet(hidden_states=model_input, timestep=per_token.to(noisy.dtype),
                    encoder_hidden_states=hidden.to(noisy.dtype), return_dict=False)[0]

    def model_index(self) -> dict[str, Any]:
        return {**super().model_index(), "expand_timesteps": True}  # what its folders are told by (and sample with)

    def scheduler_config(self) -> dict[str, Any]:
        return {"shift": 5.0}  # Wan 2.2 TI2V 5B's sampling shift (Wan-AI's config)

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        import diffusers

        pipeline = getattr(diffusers, "WanImageToVideoPipeline" if self.first_frame else "WanPipeline")
        return pipeline(tokenizer=model.tokenizers[0], text_encoder=model.text_encoders[0], vae=model.vae,
                        scheduler=scheduler, transformer=model.unet, expand_timesteps=True)

    def edit_inputs(self, images: Sequence[str], width: int, height: int) -> dict[str, Any]:
        """Image-to-video: the sample's first frame (a sample prompt's --ci) at its size."""
        if not self.first_frame:
            return {}
        if not images:
            raise ValueError("Wan 2.2 TI2V 5B trained as image-to-video renders from a first frame: give the sample "
                             "prompt `--ci path`")
        from trainers.models.edit import sample_images

        return {"image": sample_images(images[:1], width, height)[0]}


WAN22_TI2V = WanTI2V()
