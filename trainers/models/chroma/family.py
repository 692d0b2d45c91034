"""Chroma (diffusers ChromaTransformer2DModel, ChromaPipeline): FLUX.1's double and single blocks and 2x2-packed
latents, one T5-XXL text encoder (no CLIP-L, no pooled output), no guidance embedding (its modulations come from a
distilled guidance layer), and T5's padding masked in the transformer except the first padding token, as
sd-scripts' flux_train_network.py with `model_type = "chroma"` and diffusers' pipeline do. Its LoRA files use
sd-scripts' FLUX.1 names (networks.lora_flux), which ComfyUI maps to Chroma's modules.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, LoraTarget, ModelFamily, SizeConditioning
from trainers.models.chroma.rules import ChromaRules
from trainers.models.flow import TextEncoderSpec, run_t5, t5_attention_mask
from trainers.models.flow_latents import image_ids, pack_latents, unpack_latents
from trainers.models.flux.family import Flux, double_block_targets, single_block_targets


class Chroma(ChromaRules, Flux, ModelFamily):
    implementation = "https://huggingface.co/lodestones/Chroma"
    transformer_class = "ChromaTransformer2DModel"
    default_t5_length = 512
    # sd-scripts requires apply_t5_attn_mask and guidance_scale 0 for Chroma; here they are what it always does.
    fixed_settings = {"apply_t5_attn_mask": True, "guidance_scale": 0.0}
    text_encoder_specs = (TextEncoderSpec("T5EncoderModel", "text_encoder", "t5", "tokenizer", "T5-XXL",
                                          length_option="text_encoder_max_tokens"),)

    def checkpoint_variant(self, config: Any) -> "Chroma":
        return self

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(T5 hidden states read without padding, the transformer's text mask): the text tokens and the first
        padding token (ChromaPipeline's mask; sd-scripts' attn_padding = 1)."""
        (t5,), (ids,) = text_encoders, input_ids
        mask = t5_attention_mask(ids, t5.config.pad_token_id)
        hidden = run_t5(t5, ids, mask)
        lengths = mask.sum(dim=1, keepdim=True)
        text_mask = torch.arange(ids.shape[1], device=ids.device)[None, :] <= lengths
        return hidden, text_mask.to(hidden.dtype)

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                text_mask: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """The velocity for latents (B, C, h, w): packed into (h/2 x w/2) tokens of C x 4, and back."""
        _, _, height, width = noisy.shape
        tokens = pack_latents(noisy)
        image = torch.ones(tokens.shape[:2], dtype=torch.bool, device=noisy.device)
        mask = torch.cat([text_mask.to(noisy.device).bool(), image], dim=1)
        out = unet(hidden_states=tokens, timestep=timesteps.to(noisy.dtype) / 1000,
                   encoder_hidden_states=hidden.to(noisy.dtype), attention_mask=mask,
                   txt_ids=torch.zeros(hidden.shape[1], 3, device=noisy.device, dtype=noisy.dtype),
                   img_ids=image_ids(height // 2, width // 2, noisy.device, noisy.dtype), return_dict=False)[0]
        return unpack_latents(out, height, width)

    # --- samples ---

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        from diffusers import ChromaPipeline

        return ChromaPipeline(scheduler=scheduler, vae=model.vae, text_encoder=model.text_encoders[0],
                              tokenizer=model.tokenizers[0], transformer=model.unet)

    def pipeline_embeds(self, hidden: torch.Tensor, text_mask: torch.Tensor | None) -> dict[str, torch.Tensor]:
        assert text_mask is not None, "Chroma's encode_prompts gives the text mask"
        return {"prompt_embeds": hidden[:1], "negative_prompt_embeds": hidden[1:],
                "prompt_attention_mask": text_mask[:1], "negative_prompt_attention_mask": text_mask[1:]}

    def pipeline_kwargs(self, cfg_scale: float) -> dict[str, Any]:
        return {"guidance_scale": cfg_scale}  # real classifier-free guidance (sd-scripts' --l)

    # --- LoRA ---

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        return {**super().lora_metadata(v_prediction), "ss_model_type": "chroma"}

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        """FLUX.1's block layers without their modulations (Chroma has none), then img_in and txt_in (in_dims)."""
        return [*double_block_targets(unet), *single_block_targets(unet), *_input_targets(unet)]



def _input_targets(unet: nn.Module) -> Iterator[LoraTarget]:
    yield LoraTarget("lora_unet_img_in", (unet.x_embedder,))
    yield LoraTarget("lora_unet_txt_in", (unet.context_embedder,))


CHROMA = Chroma()
