"""SDXL: two CLIP text encoders and size/crop conditioning."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, ModelFamily, SizeConditioning, load_common, load_component, load_tokenizer


class StableDiffusionXL(ModelFamily):
    name = "sdxl"
    title = "SDXL"
    base_model_version = "sdxl_base_v1-0"
    modelspec_architecture = "stable-diffusion-xl-v1-base"
    unet_key_style = "sgm"
    supports_clip_skip = False  # SDXL already uses the penultimate layer of both encoders

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "",
             random_init: bool = False) -> LoadedModel:
        from transformers import CLIPTextModel, CLIPTextModelWithProjection

        unet, vae, scheduler, prediction_type = load_common(folder, weight_dtype, vae_path, random_init)
        tokenizers = [load_tokenizer(folder, s, random_init) for s in ("tokenizer", "tokenizer_2")]
        text_encoders = [
            load_component(CLIPTextModel, folder, "text_encoder", weight_dtype, random_init),
            load_component(CLIPTextModelWithProjection, folder, "text_encoder_2", weight_dtype, random_init),
        ]
        return LoadedModel(self, unet, vae, text_encoders, tokenizers, scheduler, prediction_type, str(folder))

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor],
                       clip_skip: int) -> tuple[torch.Tensor, torch.Tensor]:
        te1, te2 = text_encoders
        hidden1 = te1(input_ids[0], output_hidden_states=True).hidden_states[-2]
        out2 = te2(input_ids[1], output_hidden_states=True)
        hidden = torch.cat([hidden1, out2.hidden_states[-2].to(hidden1.dtype)], dim=-1)
        return hidden, out2.text_embeds

    def unet_kwargs(self, pooled: torch.Tensor | None, sizes: SizeConditioning | None) -> dict[str, Any]:
        assert pooled is not None and sizes is not None, "SDXL needs pooled text embeds and size conditioning"
        time_ids = torch.cat([sizes.original_size, sizes.crop_top_left, sizes.target_size], dim=1)
        return {"added_cond_kwargs": {"text_embeds": pooled, "time_ids": time_ids.to(pooled.device, pooled.dtype)}}


SDXL = StableDiffusionXL()
