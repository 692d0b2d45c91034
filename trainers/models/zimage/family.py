"""Z-Image (Turbo and Base; diffusers ZImageTransformer2DModel, ZImagePipeline), as musubi-tuner trains it: captions
in Qwen3's chat template read by a Qwen3 text encoder (its second-to-last hidden states, without padding), a
single-stream transformer over 2x2 patches of FLUX.1's 16-channel latents, timestep t = 1 - sigma, and an output
that is minus the velocity. Its LoRA files use ComfyUI's names (`lora_unet_layers_0_attention_qkv`, q, k and v as one
module; `tools convert --to musubi` writes musubi-tuner's split names, lora_names.py), on the main layers' attention
and feed-forward (musubi's lora_zimage leaves the modulations and refiners out).
"""
from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, LoraTarget, ModelFamily, ModelFiles, SizeConditioning
from trainers.models.flow import FlowFamily, TextEncoderSpec, last_blocks, run_frozen
from trainers.models.zimage.rules import ZImageRules

TEXT_LENGTH = 512  # musubi-tuner's and ZImagePipeline's max_sequence_length
CHAT_TEMPLATE = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"  # Qwen3's, thinking enabled


class ZImage(ZImageRules, FlowFamily, ModelFamily):
    implementation = "https://github.com/Tongyi-MAI/Z-Image"
    transformer_class = "ZImageTransformer2DModel"
    latent_scaling = (0.3611, 0.1159)  # FLUX.1's autoencoder
    fixed_settings = {"model_prediction_type": "raw", "guidance_scale": 0.0}  # no guidance embedding
    text_encoder_specs = (TextEncoderSpec("Qwen3Model", "text_encoder", "auto", "tokenizer", "Qwen3",
                                          max_length=TEXT_LENGTH, template=CHAT_TEMPLATE),)
    pad_token_id: int = 0  # its tokenizer's, set when loaded

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        return _with_pad_token(super().load(folder, weight_dtype, vae_path, random_init))

    def load_checkpoint(self, ckpt: Any, weight_dtype: torch.dtype, vae_path: str, files: ModelFiles) -> Any:
        """ComfyUI's split files: the diffusion_models file (NextDiT layout), text_encoder's Qwen3 and ae's
        autoencoder (flow_checkpoint.py), the tokenizer from tokenizer_cache_dir (Qwen/Qwen3-4B's)."""
        return _with_pad_token(super().load_checkpoint(ckpt, weight_dtype, vae_path, files))

    def to_checkpoint(self, model: LoadedModel, denoiser_state: Any) -> dict[str, torch.Tensor]:
        """The transformer alone in the reference (NextDiT) layout: ComfyUI's diffusion_models file, musubi-tuner's
        --dit."""
        from accelerate.utils import extract_model_from_parallel

        from trainers.models.zimage import reference

        return reference.to_reference(denoiser_state, extract_model_from_parallel(model.unet).config)

    def swap_blocks(self, denoiser: nn.Module, count: int) -> list[nn.Module]:
        return last_blocks(denoiser.layers, count, "layers")

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(Qwen3's second-to-last hidden states, zero on the padding; the text mask), as ZImagePipeline encodes."""
        (qwen,), (ids,) = text_encoders, input_ids
        mask = ids != self.pad_token_id
        hidden = run_frozen(qwen, lambda: qwen(input_ids=ids, attention_mask=mask,
                                               output_hidden_states=True).hidden_states[-2])
        return hidden * mask[..., None].to(hidden.dtype), mask.to(hidden.dtype)

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                text_mask: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """The velocity for latents (B, C, h, w): the transformer reads each image as (C, 1, h, w) with its caption's
        states without padding, at t = 1 - sigma, and returns minus the velocity."""
        captions = _without_padding(hidden.to(noisy.dtype), text_mask)
        out = unet(list(noisy.unsqueeze(2)), 1 - timesteps.to(noisy.dtype) / 1000, captions, return_dict=False)[0]
        return -torch.stack(out).squeeze(2)

    # --- samples ---

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        from diffusers import ZImagePipeline

        return ZImagePipeline(scheduler=scheduler, vae=model.vae, text_encoder=model.text_encoders[0],
                              tokenizer=model.tokenizers[0], transformer=model.unet)

    def pipeline_embeds(self, hidden: torch.Tensor, text_mask: torch.Tensor | None) -> dict[str, Any]:
        captions = _without_padding(hidden, text_mask)
        return {"prompt_embeds": captions[:1], "negative_prompt_embeds": captions[1:]}

    # --- LoRA ---

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        return {**super().lora_metadata(v_prediction), "modelspec.implementation": self.implementation,
                "modelspec.prediction_type": None, "ss_network_module": "networks.lora_zimage",
                **self.flow_metadata()}

    def lora_in_own_names(self, state: dict[str, torch.Tensor],
                          network_alpha: float | None = None) -> dict[str, torch.Tensor]:
        """musubi-tuner's split q, k, v fused as ComfyUI's attention_qkv (lora_names.py)."""
        from trainers.models.zimage.lora_names import comfy_names

        return comfy_names(state)

    def lora_in_musubi_names(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """q, k and v apart, as musubi-tuner's lora_zimage trains them (lora_names.py)."""
        from trainers.models.zimage.lora_names import comfy_names, musubi_names

        return musubi_names(comfy_names(state))

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        return [target for i, layer in enumerate(unet.layers) for target in _layer_targets(i, layer)]


def _with_pad_token(model: LoadedModel) -> LoadedModel:
    """`model` with a copy of its family that knows its tokenizer's pad token (the text mask's)."""
    family = copy.copy(model.family)
    family.pad_token_id = model.tokenizers[0].pad_token_id
    return replace(model, family=family)


def _without_padding(hidden: torch.Tensor, text_mask: torch.Tensor | None) -> list[torch.Tensor]:
    """Each caption's states (L_i, D) without its padding."""
    assert text_mask is not None, "Z-Image's encode_prompts gives the text mask"
    return [states[keep.to(states.device).bool()] for states, keep in zip(hidden, text_mask)]


def _layer_targets(index: int, layer: nn.Module) -> Iterator[LoraTarget]:
    """A main layer's modules under ComfyUI's names (NextDiT: attention.qkv, attention.out, feed_forward.w1-3)."""
    prefix, attn = f"lora_unet_layers_{index}_", layer.attention
    yield LoraTarget(prefix + "attention_qkv", (attn.to_q, attn.to_k, attn.to_v))
    yield LoraTarget(prefix + "attention_out", (attn.to_out[0],))
    for name in ("w1", "w2", "w3"):
        yield LoraTarget(prefix + f"feed_forward_{name}", (getattr(layer.feed_forward, name),))


ZIMAGE = ZImage()
