"""SD1.x and SD2.x: one CLIP text encoder, no added conditions."""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from trainers.models.base import LoadedModel, ModelFamily, final_layer_norm, load_common, load_component, load_tokenizer


class StableDiffusion(ModelFamily):
    unet_key_style = "diffusers"

    def __init__(self, name: str, title: str, base_model_version: str, modelspec_architecture: str) -> None:
        self.name = name
        self.title = title
        self.base_model_version = base_model_version
        self.modelspec_architecture = modelspec_architecture

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "",
             random_init: bool = False) -> LoadedModel:
        from transformers import CLIPTextModel

        unet, vae, scheduler, prediction_type = load_common(folder, weight_dtype, vae_path, random_init)
        tokenizer = load_tokenizer(folder, "tokenizer", random_init)
        text_encoder = load_component(CLIPTextModel, folder, "text_encoder", weight_dtype, random_init)
        return LoadedModel(self, unet, vae, [text_encoder], [tokenizer], scheduler, prediction_type, str(folder))

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor],
                       clip_skip: int) -> tuple[torch.Tensor, None]:
        text_encoder = text_encoders[0]
        if clip_skip <= 1:
            return text_encoder(input_ids[0]).last_hidden_state, None
        out = text_encoder(input_ids[0], output_hidden_states=True)
        # kohya/A1111 clip skip: an earlier layer's output, passed through the final layer norm.
        return final_layer_norm(text_encoder)(out.hidden_states[-clip_skip]), None


SD1 = StableDiffusion("sd1", "SD1.x", "sd_v1", "stable-diffusion-v1")
SD2 = StableDiffusion("sd2", "SD2.x", "sd_v2", "stable-diffusion-v2-768-v")
