"""Wan 2.2 A14B text-to-video (diffusers WanPipeline with `transformer` and `transformer_2`), trained as musubi-tuner
trains it with --timestep_boundary: the two 14B experts are one denoiser (experts.py), each sample going to the
expert of its timestep. `train_expert = "both"` gives each expert its own LoRA, trained only on its range, saved
beside the run's file as `<name>_high_noise.safetensors` and `<name>_low_noise.safetensors` (in Wan 2.1's musubi-tuner
names, which ComfyUI reads, and diffusers' WanPipeline loads: the low-noise one with load_into_transformer_2=True);
the run's own file holds both under `lora_unet_high_noise_...` / `lora_unet_low_noise_...`. With one expert
("high_noise", "low_noise") its timesteps are scaled into its range (musubi-tuner's min_timestep/max_timestep) and
the run's file is that expert's LoRA. (musubi-tuner itself, given both experts, trains one LoRA over both: here
each expert has its own, as ai-toolkit saves them and as ComfyUI's Wan 2.2 workflows load them.)
"""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.data.video_cache import WindowExtras
from trainers.models.base import LoadedModel, LoraTarget, SizeConditioning
from trainers.models.flow import last_blocks
from trainers.models.wan.family import Wan, block_targets
from trainers.models.wan.wan22.generate_loras import ExpertLoras
from trainers.models.wan.wan22.experts import EXPERT_NAMES, ExpertPair, InactiveOffload
from trainers.models.wan.wan22.i2v import ConditionSlot, conditioned_objective, window_extras
from trainers.models.wan.wan22.rules import (
    I2V_BOUNDARY,
    T2V_BOUNDARY,
    Wan22Rules,
    boundary_ratio,
    folder_boundary,
    is_i2v_folder,
)

ATTRIBUTES = dict(zip(EXPERT_NAMES, ("transformer", "transformer_2")))
PREFIX = "lora_unet_"


class Wan22(ExpertLoras, Wan22Rules, Wan):
    implementation = "https://github.com/Wan-Video/Wan2.2"
    folder_ratio: float | None = None  # the loaded folder's boundary_ratio
    boundary = T2V_BOUNDARY  # the run's (timestep_boundary, else the folder's)
    train_expert = "both"
    i2v = False  # WanImageToVideoPipeline's pair: the first frame's condition concatenated (i2v.py)
    slot = ConditionSlot()
    offloads_denoiser = False  # offload_inactive_dit: the expert not called waits in host RAM (experts.py)

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        import diffusers

        from trainers.models.components import load_component

        model = super().load(folder, weight_dtype, vae_path, random_init)  # the high-noise expert and the rest
        second = load_component(getattr(diffusers, self.transformer_class), folder, "transformer_2", weight_dtype,
                                random_init)
        family = copy.copy(model.family)
        family.i2v = is_i2v_folder(folder)
        family.folder_ratio = folder_boundary(folder)
        family.boundary = boundary_ratio(None, family.folder_ratio, family.default_boundary)
        return dataclasses.replace(model, family=family, unet=ExpertPair(model.unet, second, family.boundary))

    def configured(self, values: Mapping[str, Any]) -> Any:
        clone = super().configured(values)
        clone.boundary = boundary_ratio(values.get("timestep_boundary"), self.folder_ratio, self.default_boundary)
        clone.train_expert = str(values.get("train_expert") or "both")
        clone.slot = ConditionSlot()  # the run's own (I2V: each step's first-frame condition)
        clone.offloads_denoiser = bool(values.get("offload_inactive_dit"))
        return clone

    @property
    def default_boundary(self) -> float:
        return I2V_BOUNDARY if self.i2v else T2V_BOUNDARY

    def adapt_trainable(self, cfg: Any, session: Any, trainable: Any) -> Any:
        """I2V: each step's first-frame condition (i2v.py) in the slot denoise reads."""
        if not self.i2v:
            return trainable
        return dataclasses.replace(trainable, objective=conditioned_objective(trainable.objective, self.slot))

    def window_extras(self, model: LoadedModel) -> WindowExtras | None:
        """I2V: each window's first-frame latent, cached beside its latents (i2v.py)."""
        return window_extras(model.vae) if self.i2v else None

    @property
    def trained(self) -> tuple[str, ...]:
        """The experts the LoRA trains (EXPERT_NAMES' names)."""
        return EXPERT_NAMES if self.train_expert == "both" else (self.train_expert,)

    def timestep_range(self) -> tuple[float, float]:
        """The noise levels (sigma) the trained expert(s) see."""
        return {"high_noise": (self.boundary, 1.0), "low_noise": (0.0, self.boundary)}.get(self.train_expert,
                                                                                           (0.0, 1.0))

    # --- training ---

    def draw_sigmas(self, normal: torch.Tensor, uniform: torch.Tensor, latent_size: tuple[int, int],
                    min_timestep: int | None, max_timestep: int | None) -> torch.Tensor:
        sigmas = super().draw_sigmas(normal, uniform, latent_size, min_timestep, max_timestep)
        low, high = self.timestep_range()
        return sigmas * (high - low) + low  # one expert: scaled into its range (musubi-tuner's t_min/t_max)

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                text_mask: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """Both experts: each sample through the expert of its timestep (routed on the float timesteps, before the
        cast); one: that expert, whatever the timestep (its range is drawn)."""
        if self.i2v:  # the first frame's mask and latent after the noisy latents, as WanImageToVideoPipeline
            if self.slot.condition is None:
                raise ValueError("Wan 2.2 image-to-video needs each clip's first frame (adapt_trainable's condition)")
            noisy = torch.cat([noisy, self.slot.condition.to(noisy.device, noisy.dtype)], dim=1)
        inputs = {"hidden_states": noisy, "encoder_hidden_states": hidden.to(noisy.dtype), "return_dict": False}
        if self.train_expert == "both":
            return unet(timestep=timesteps, boundary=self.boundary, **inputs)[0]
        expert = getattr(unet, ATTRIBUTES[self.train_expert])
        return expert(timestep=timesteps.to(noisy.dtype), **inputs)[0]

    def place_denoiser(self, denoiser: nn.Module, device: torch.device) -> InactiveOffload | None:
        """offload_inactive_dit: the expert trained first (high noise, with both) on the device, the other in host
        RAM until its timesteps come; without it both on the device."""
        if not self.offloads_denoiser:
            denoiser.to(device)
            return None
        return InactiveOffload(denoiser, device, getattr(denoiser, ATTRIBUTES[self.trained[0]]))

    def swap_blocks(self, denoiser: nn.Module, count: int) -> list[nn.Module]:
        """blocks_to_swap of each expert (musubi-tuner swaps that many blocks in each model)."""
        return [block for expert in denoiser.experts for block in last_blocks(expert.blocks, count, "blocks")]

    # --- samples ---

    def scheduler_config(self) -> dict[str, Any]:
        return {"shift": 12.0}  # Wan 2.2 T2V's sampling shift (musubi-tuner's docs/wan.md)

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        import diffusers

        pair = model.unet
        pipeline = getattr(diffusers, "WanImageToVideoPipeline" if self.i2v else "WanPipeline")
        return pipeline(tokenizer=model.tokenizers[0], text_encoder=model.text_encoders[0], vae=model.vae,
                        scheduler=scheduler, transformer=pair.transformer, transformer_2=pair.transformer_2,
                        boundary_ratio=self.boundary)

    def edit_inputs(self, images: Sequence[str], width: int, height: int) -> dict[str, Any]:
        """I2V: the sample's first frame (a sample prompt's --ci, Generate's input image) at its size."""
        if not self.i2v:
            return {}
        if not images:
            raise ValueError("Wan 2.2 image-to-video renders from a first frame: give the sample prompt `--ci path`")
        from trainers.models.edit import sample_images

        return {"image": sample_images(images[:1], width, height)[0]}

    # --- full weights ---

    def finetuned_part(self, denoiser: nn.Module) -> nn.Module:
        """Both experts, or the one train_expert names (the other saved as it was loaded)."""
        return denoiser if self.train_expert == "both" else getattr(denoiser, ATTRIBUTES[self.train_expert])

    def denoiser_parts(self, denoiser: nn.Module, state: Mapping[str, torch.Tensor]
                       ) -> dict[str, tuple[nn.Module, Mapping[str, torch.Tensor]]]:
        """The pair's folder: each expert in its own subfolder, as the published folders have them."""
        return {name: (getattr(denoiser, name), {key.removeprefix(f"{name}."): tensor for key, tensor in state.items()
                                                 if key.startswith(f"{name}.")}) for name in ATTRIBUTES.values()}

    def model_index(self) -> dict[str, Any]:
        """The run's boundary (where its experts were trained to switch) and the pipeline of its task."""
        return {**super().model_index(), "boundary_ratio": self.boundary,
                "_class_name": "WanImageToVideoPipeline" if self.i2v else self.pipeline_class}

    # --- LoRA ---

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        return {**super().lora_metadata(v_prediction), "ss_timestep_boundary": self.boundary,
                "ss_train_expert": self.train_expert}

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        """The trained experts' block linears: Wan 2.1's names for one expert, each expert's marked for both."""
        out = []
        for expert_name in self.trained:
            attribute = ATTRIBUTES[expert_name]
            expert = getattr(unet, attribute)
            for index, block in enumerate(expert.blocks):
                for target in block_targets(index, block):
                    name = marked(target.name, expert_name) if len(self.trained) > 1 else target.name
                    out.append(dataclasses.replace(target, name=name, path=f"{attribute}.{target.path}"))
        return out

    def lora_file_parts(self, path: Path, state: dict[str, torch.Tensor]) -> dict[Path, dict[str, torch.Tensor]]:
        """Both experts: a file per expert beside the run's (`<name>_high_noise.safetensors`), in Wan 2.1's names."""
        parts = expert_states(state)
        if not parts:
            return {}
        return {path.with_name(f"{path.stem}_{name}{path.suffix}"): part for name, part in parts.items()}

    def lora_for_pipeline(self, state: dict[str, torch.Tensor], model: Any) -> dict[str, torch.Tensor]:
        """One expert's file (Wan 2.1's names) as WanPipeline.load_lora_weights takes it (into transformer_2 with
        load_into_transformer_2=True: both experts have the same modules)."""
        from trainers.models.flow_lora import kohya_to_diffusers

        if expert_states(state):
            raise ValueError("this file holds both experts' LoRAs: load its _high_noise and _low_noise files, the "
                             "second with load_into_transformer_2=True")
        expert = model.unet.transformer
        view = dataclasses.replace(model, unet=expert) if isinstance(model, LoadedModel) else model
        targets = [t for i, block in enumerate(expert.blocks) for t in block_targets(i, block)]
        return kohya_to_diffusers(state, view, targets, ())


def marked(name: str, expert: str) -> str:
    """`lora_unet_blocks_0_...` as the run's file names it for `expert` (`lora_unet_high_noise_blocks_0_...`)."""
    return f"{PREFIX}{expert}_{name.removeprefix(PREFIX)}"


def expert_states(state: Mapping[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """A file of both experts split into one state per expert, in Wan 2.1's names ({}: not such a file)."""
    out: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in state.items():
        for expert in EXPERT_NAMES:
            mark = f"{PREFIX}{expert}_"
            if key.startswith(mark):
                out.setdefault(expert, {})[PREFIX + key.removeprefix(mark)] = tensor
    return out


WAN22 = Wan22()
