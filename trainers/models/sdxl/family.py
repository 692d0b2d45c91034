"""SDXL: two CLIP text encoders and size/crop conditioning; SGM single files; kohya names the SGM UNet."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, ModelFamily, SizeConditioning
from trainers.models.components import load_common, load_tokenizer
from trainers.models.pending_encoders import load_text_encoder
from trainers.models.convert import clip_to_ldm, openclip_to_ldm
from trainers.models.prompt_states import apply_weights, chunk_count, merge_chunks
from trainers.models.sdxl.rules import TE1_PREFIX, TE2_PREFIX, StableDiffusionXLRules


class StableDiffusionXL(StableDiffusionXLRules, ModelFamily):
    base_model_version = "sdxl_base_v1-0"
    modelspec_architecture = "stable-diffusion-xl-v1-base"
    implementation = "https://github.com/Stability-AI/generative-models"
    native_size = 1024
    vae_fp16_unsafe = True

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "",
             random_init: bool = False) -> LoadedModel:
        from transformers import CLIPTextModel, CLIPTextModelWithProjection

        unet, vae, scheduler, prediction_type = load_common(folder, weight_dtype, vae_path, random_init)
        tokenizers = [load_tokenizer(folder, s, random_init) for s in ("tokenizer", "tokenizer_2")]
        text_encoders = [
            load_text_encoder(CLIPTextModel, folder, "text_encoder", weight_dtype, random_init),
            load_text_encoder(CLIPTextModelWithProjection, folder, "text_encoder_2", weight_dtype, random_init),
        ]
        return LoadedModel(self, unet, vae, text_encoders, tokenizers, scheduler, prediction_type, str(folder))

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        te1, te2 = text_encoders
        batch = input_ids[0].shape[0]
        chunks = chunk_count(input_ids[0], te1.config.max_position_embeddings)
        flat1, flat2 = (ids.reshape(batch * chunks, -1) for ids in input_ids)
        hidden1 = te1(flat1, output_hidden_states=True).hidden_states[-2]
        out2 = te2(flat2, output_hidden_states=True)
        hidden2 = out2.hidden_states[-2].to(hidden1.dtype)
        parts = []
        for k, hidden in enumerate((hidden1, hidden2)):
            hidden = merge_chunks(hidden.reshape(batch, -1, hidden.shape[-1]), chunks)
            parts.append(apply_weights(hidden, None if weights is None else weights[k], chunks))
        # The pooled embedding is the first chunk's (at its EOS), as sd-scripts takes it; it is never weighted.
        pooled = out2.text_embeds.reshape(batch, chunks, -1)[:, 0]
        return torch.cat(parts, dim=-1), pooled

    def unet_kwargs(self, pooled: torch.Tensor | None, sizes: SizeConditioning | None) -> dict[str, Any]:
        assert pooled is not None and sizes is not None, "SDXL needs pooled text embeds and size conditioning"
        time_ids = torch.cat([sizes.original_size, sizes.crop_top_left, sizes.target_size], dim=1)
        return {"added_cond_kwargs": {"text_embeds": pooled, "time_ids": time_ids.to(pooled.device, pooled.dtype)}}

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        from diffusers import StableDiffusionXLPipeline

        te1, te2 = model.text_encoders
        tok1, tok2 = model.tokenizers
        return StableDiffusionXLPipeline(vae=model.vae, text_encoder=te1, text_encoder_2=te2, tokenizer=tok1,
                                         tokenizer_2=tok2, unet=model.unet, scheduler=scheduler,
                                         add_watermarker=False)

    def text_encoders_to_original(self, states: list[dict[str, torch.Tensor]], text_encoders: list[nn.Module],
                                  prediction_type: str) -> dict[str, torch.Tensor]:
        out = clip_to_ldm(states[0], TE1_PREFIX + "text_model.")
        out.update(openclip_to_ldm(states[1], TE2_PREFIX))
        if prediction_type == "v_prediction":
            out["v_pred"] = torch.zeros(0)  # ComfyUI's marker of a v-prediction SDXL model
        return out

    def model_index(self) -> dict[str, Any]:
        return {"force_zeros_for_empty_prompt": True}


SDXL = StableDiffusionXL()
