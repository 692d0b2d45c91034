"""The frozen denoiser with a ControlNet's residuals added, called as the denoiser is: by the family's denoise in
training, by the family's pipeline in samples (what they read of the denoiser, its config and dtype, is its own).

- UNet families (SD1.x/2.x, SDXL): diffusers' ControlNetModel, copied from the UNet (its encoder half, zero
  convolutions at zero); it reads the control image's pixels in [0, 1].
- Flow families that name a `controlnet_class` (FLUX.1: FluxControlNetModel, trainers/models/flow.py): built from
  the transformer with its from_transformer (its first blocks copied, the control input at zero); it reads the
  control image as the family's `control_tokens` make them (FLUX.1: the VAE's latents, packed), as
  FluxControlNetPipeline feeds it.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.core.options import TrainConfig
from trainers.methods.controlnet.rules import FAMILIES, family_message
from trainers.models import LoadedModel

CONDITIONING_CHANNELS = (16, 32, 96, 256)  # diffusers' and sd-scripts' for SD's VAE (8x)


class Controlled(nn.Module):
    """What both kinds share: the modules, the scale and the control image, turned into the ControlNet's input
    once per image (samples call the denoiser once per step with the same image)."""

    def __init__(self, denoiser: nn.Module, controlnet: nn.Module, scale: float,
                 condition: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        super().__init__()
        self.unet, self.controlnet, self.scale = denoiser, controlnet, scale
        self.condition = condition or (lambda pixels: pixels)  # pixels -> what the ControlNet reads
        self._control: torch.Tensor | None = None
        self._conditioning: torch.Tensor | None = None

    @property
    def control(self) -> torch.Tensor | None:
        """(B or 1, 3, H, W) control images in [0, 1]; None: the denoiser alone (a sample without --cn)."""
        return self._control

    @control.setter
    def control(self, pixels: torch.Tensor | None) -> None:
        self._control, self._conditioning = pixels, None

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("unet"), name)

    def conditioning(self, batch: int, like: torch.Tensor) -> torch.Tensor:
        """The control as the ControlNet reads it, one per sample of the batch, on `like`'s device and dtype."""
        if self._conditioning is None:
            self._conditioning = self.condition(self._control)
        cond = self._conditioning.to(like.device, like.dtype)
        return cond.expand(batch, *cond.shape[1:]) if cond.shape[0] == 1 else cond


class ControlledUNet(Controlled):
    def forward(self, sample: torch.Tensor, timestep: torch.Tensor, encoder_hidden_states: torch.Tensor,
                return_dict: bool = True, **kwargs: Any) -> Any:
        if self.control is None:
            return self.unet(sample, timestep, encoder_hidden_states, return_dict=return_dict, **kwargs)
        down, mid = self.controlnet(sample, timestep, encoder_hidden_states=encoder_hidden_states,
                                    controlnet_cond=self.conditioning(sample.shape[0], sample),
                                    conditioning_scale=self.scale, return_dict=False, **kwargs)
        return self.unet(sample, timestep, encoder_hidden_states, down_block_additional_residuals=down,
                         mid_block_additional_residual=mid, return_dict=return_dict, **kwargs)


class ControlledTransformer(Controlled):
    """FLUX.1's transformer: the ControlNet reads the transformer's own inputs and the control tokens; its block
    outputs are added to the transformer's double and single blocks'."""

    def forward(self, hidden_states: torch.Tensor, return_dict: bool = True, **kwargs: Any) -> Any:
        if self.control is None:
            return self.unet(hidden_states=hidden_states, return_dict=return_dict, **kwargs)
        double, single = self.controlnet(hidden_states=hidden_states,
                                         controlnet_cond=self.conditioning(hidden_states.shape[0], hidden_states),
                                         conditioning_scale=self.scale, return_dict=False, **kwargs)
        return self.unet(hidden_states=hidden_states, controlnet_block_samples=_cast(double, hidden_states),
                         controlnet_single_block_samples=_cast(single, hidden_states), return_dict=return_dict,
                         **kwargs)


def _cast(samples: list[torch.Tensor] | None, like: torch.Tensor) -> list[torch.Tensor] | None:
    """The ControlNet's (float32, trained) outputs in the frozen transformer's dtype."""
    return None if samples is None else [s.to(like.dtype) for s in samples]


def controlled(cfg: TrainConfig, model: LoadedModel) -> Controlled:
    """The model's denoiser with a new ControlNet (or the one at controlnet_model_name_or_path), in float32."""
    import diffusers

    if model.family.name not in FAMILIES:  # a hub model: Validate could not read its family
        raise ConfigError([ConfigIssue("pretrained_model_name_or_path", family_message(model.family.name), "model")])
    family_class = getattr(model.family, "controlnet_class", None)  # None: a UNet family
    source = cfg.controlnet_model_name_or_path.strip()
    if family_class is None:
        controlnet = (diffusers.ControlNetModel.from_pretrained(source, torch_dtype=torch.float32) if source
                      else new_unet_controlnet(model))
        return ControlledUNet(model.unet, controlnet.to(torch.float32), cfg.conditioning_scale)
    cls = getattr(diffusers, family_class)
    controlnet = (cls.from_pretrained(source, torch_dtype=torch.float32) if source
                  else new_transformer_controlnet(cls, cfg, model.unet))
    vae, family = model.vae, model.family
    return ControlledTransformer(model.unet, controlnet.to(torch.float32), cfg.conditioning_scale,
                                 lambda pixels: family.control_tokens(vae, pixels))


def new_unet_controlnet(model: LoadedModel) -> nn.Module:
    from diffusers import ControlNetModel

    # The control image's embedding halves its size once per VAE downsampling (three times for SD's VAE).
    halvings = len(model.vae.config.block_out_channels) - 1
    return ControlNetModel.from_unet(model.unet, conditioning_embedding_out_channels=CONDITIONING_CHANNELS[
        :halvings + 1])


def new_transformer_controlnet(cls: Any, cfg: TrainConfig, transformer: nn.Module) -> nn.Module:
    """The ControlNet's blocks start as copies of the transformer's first ones (diffusers' from_transformer)."""
    config = transformer.config
    for option, have in (("num_double_layers", config.num_layers), ("num_single_layers", config.num_single_layers)):
        if getattr(cfg, option) > have:
            raise ConfigError([ConfigIssue(option, f"is {getattr(cfg, option)}, but the model's transformer has "
                                           f"{have} such blocks to copy: set it to {have} or fewer", "controlnet")])
    return cls.from_transformer(transformer, num_layers=cfg.num_double_layers, num_single_layers=cfg.num_single_layers,
                                attention_head_dim=config.attention_head_dim,
                                num_attention_heads=config.num_attention_heads)
