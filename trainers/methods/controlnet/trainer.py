"""ControlNet: a diffusers ControlNet (copied from the UNet or FLUX.1's transformer, or an existing one: controlled.py)
is all that trains; the denoiser, text encoders and VAE stay frozen and take its residuals. Saved as a diffusers
ControlNet folder and a single safetensors file with the same (diffusers) keys, which ComfyUI's ControlNet loader
reads."""
from __future__ import annotations

from dataclasses import replace
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from trainers.core.options import TrainConfig
from trainers.core.prompts import SamplePrompt
from trainers.data.control_images import ControlImages, sample_control
from trainers.methods.controlnet.controlled import Controlled, controlled as make_controlled
from trainers.methods.controlnet.rules import SUFFIX
from trainers.models import LoadedModel
from trainers.models.single_file import SAVE_DTYPES
from trainers.train.diffusion import NoisePredictor, NoiseOptions, diffusion_loss
from trainers.train.metadata import modelspec_fields
from trainers.train.method import Method, StepHook, Trainable, freeze
from trainers.train.session import Session


class ControlSamples(StepHook):
    """Samples go through the ControlNet: the denoiser is the controlled one while they render, and a prompt's --cn
    image (resized to the sample's size, as sd-scripts) is its control; a prompt without one renders unguided."""

    def __init__(self, model: LoadedModel, controlled: Controlled) -> None:
        self.model, self.controlled = model, controlled

    @contextlib.contextmanager
    def sampling_weights(self) -> Iterator[None]:
        unet, self.model.unet = self.model.unet, self.controlled
        try:
            yield
        finally:
            self.model.unet, self.controlled.control = unet, None

    @contextlib.contextmanager
    def sampling_prompt(self, prompt: SamplePrompt, width: int, height: int) -> Iterator[None]:
        self.controlled.control = None if not prompt.control_image else sample_control(
            Path(prompt.control_image).expanduser(), width, height)
        try:
            yield
        finally:
            self.controlled.control = None


class ControlNetFiles:
    """The output: `<name>/` (ControlNetModel.from_pretrained) and `<name>.safetensors` beside it."""

    suffix = ""

    def __init__(self, cfg: TrainConfig, controlnet: nn.Module) -> None:
        self.controlnet, self.dtype = controlnet, SAVE_DTYPES[cfg.save_precision]
        self.metadata = {"ss_output_name": cfg.output_name,
                         **{f"modelspec.{k}": v for k, v in modelspec_fields(cfg).items()}}

    def save(self, path: Path, epoch: int, step: int) -> None:
        state = {k: v.detach().to("cpu", self.dtype).contiguous() for k, v in self.controlnet.state_dict().items()}
        self.controlnet.save_pretrained(str(path), state_dict=state, safe_serialization=True)
        save_file(state, str(path.with_name(path.name + SUFFIX)),
                  {**self.metadata, "ss_epoch": str(epoch), "ss_steps": str(step)})

    def nbytes(self) -> int:
        item = torch.empty((), dtype=self.dtype).element_size()
        return 2 * item * sum(p.numel() for p in self.controlnet.parameters())


class ControlNet(Method):
    def make_trainable(self, cfg: TrainConfig, session: Session) -> Trainable:
        model = session.model
        freeze(model.unet, model.vae, *model.text_encoders)
        controlled = make_controlled(cfg, model)
        controlnet = controlled.controlnet.to(next(model.unet.parameters()).device)
        controlnet.requires_grad_(True)
        controlnet.train()
        if cfg.gradient_checkpointing:
            controlnet.enable_gradient_checkpointing()
        # The family's denoise calls the controlled denoiser as it calls the denoiser.
        predictor = NoisePredictor(replace(model, unet=controlled), None, cfg.clip_skip, train_text_encoder=False,
                                   text_encoders_cached=cfg.cache_text_encoder_outputs, memoize=session.memoize_text)
        controls = ControlImages(session.catalog, Path(cfg.conditioning_data_dir).expanduser(), cfg.seed)

        def objective(predictor: nn.Module, model: LoadedModel, batch: dict[str, Any], opts: NoiseOptions,
                      weight_dtype: torch.dtype) -> torch.Tensor:
            controlled.control = controls(batch["keys"])
            return diffusion_loss(predictor, model, batch, opts, weight_dtype)

        groups = [{"params": list(controlnet.parameters()), "lr": cfg.learning_rate, "name": "controlnet"}]
        return Trainable(model, predictor, groups, ControlNetFiles(cfg, controlnet),
                         hooks=[ControlSamples(model, controlled)], objective=objective)


METHOD = ControlNet()
