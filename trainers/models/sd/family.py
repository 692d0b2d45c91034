"""SD1.x and SD2.x: one CLIP text encoder, no added conditions; LDM single files; kohya names the diffusers UNet."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, ModelFamily
from trainers.models.components import final_layer_norm, load_common, load_tokenizer
from trainers.models.pending_encoders import load_text_encoder
from trainers.models.convert import clip_to_ldm, openclip_to_ldm
from trainers.models.prompt_states import apply_weights, chunk_count, merge_chunks
from trainers.models.sd import rules
from trainers.models.sd.rules import StableDiffusionRules


class StableDiffusion(StableDiffusionRules, ModelFamily):
    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "",
             random_init: bool = False) -> LoadedModel:
        from transformers import CLIPTextModel

        unet, vae, scheduler, prediction_type = load_common(folder, weight_dtype, vae_path, random_init)
        tokenizer = load_tokenizer(folder, "tokenizer", random_init)
        text_encoder = load_text_encoder(CLIPTextModel, folder, "text_encoder", weight_dtype, random_init)
        return LoadedModel(self, unet, vae, [text_encoder], [tokenizer], scheduler, prediction_type, str(folder))

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, None]:
        text_encoder = text_encoders[0]
        ids = input_ids[0]
        chunks = chunk_count(ids, text_encoder.config.max_position_embeddings)
        flat = ids.reshape(ids.shape[0] * chunks, -1)
        if clip_skip <= 1:
            hidden = text_encoder(flat).last_hidden_state
        else:
            out = text_encoder(flat, output_hidden_states=True)
            # kohya/A1111 clip skip: an earlier layer's output, passed through the final layer norm.
            hidden = final_layer_norm(text_encoder)(out.hidden_states[-clip_skip])
        # SD2's padding is not EOS; sd-scripts means to patch empty chunks' first state for it, but its test
        # never matches (an id compared with the EOS text), so both SD1 and SD2 merge chunks the same way.
        hidden = merge_chunks(hidden.reshape(ids.shape[0], -1, hidden.shape[-1]), chunks)
        return apply_weights(hidden, None if weights is None else weights[0], chunks), None

    def checkpoint_prediction_type(self, global_step: int | None) -> str | None:
        if self.name == "sd2" and global_step == 875000:
            return "epsilon"  # Stability's SD2 512-base checkpoint (the same test diffusers' converter uses)
        return None

    def default_size(self, prediction_type: str) -> int:
        return 768 if self.name == "sd2" and prediction_type == "v_prediction" else self.native_size

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        from diffusers import StableDiffusionPipeline

        return StableDiffusionPipeline(
            vae=model.vae, text_encoder=model.text_encoders[0], tokenizer=model.tokenizers[0], unet=model.unet,
            scheduler=scheduler, safety_checker=None, feature_extractor=None, requires_safety_checker=False)

    def text_encoders_to_original(self, states: list[dict[str, torch.Tensor]], text_encoders: list[nn.Module],
                                  prediction_type: str) -> dict[str, torch.Tensor]:
        prefix = self.single_file_text_encoders[0].prefix
        if self.name == "sd1":
            return clip_to_ldm(states[0], prefix + "text_model.")
        # SD2's diffusers text encoder drops OpenCLIP's last layer; the file has it (unused) as A1111 expects.
        return openclip_to_ldm(states[0], prefix, pad_layers_to=text_encoders[0].config.num_hidden_layers + 1)

    def architecture_for(self, v_prediction: bool) -> str:
        if self.name == "sd2":
            return "stable-diffusion-v2-768-v" if v_prediction else "stable-diffusion-v2-512"
        return self.modelspec_architecture

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        return {**super().lora_metadata(v_prediction), "ss_v2": self.name == "sd2"}

    def model_index(self) -> dict[str, Any]:
        return {"requires_safety_checker": False, "safety_checker": [None, None]}


SD1 = StableDiffusion.of(rules.SD1)
SD2 = StableDiffusion.of(rules.SD2)
