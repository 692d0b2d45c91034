"""ERNIE-Image (diffusers ErnieImageTransformer2DModel, ErnieImagePipeline), as its pipeline runs it and ai-toolkit,
SimpleTuner and OneTrainer train it:

- each caption read by Ministral 3 (Mistral3Model) with its BOS, no template: its second-to-last hidden states, as
  many as the caption has tokens (the pipeline encodes each prompt without padding; here captions are padded on the
  right to 512 tokens, OneTrainer's length, and masked: a causal model gives the real tokens the same states). The
  transformer takes them with their lengths (text_bth, text_lens) and masks the rest.
- latents of FLUX.2's 32-channel autoencoder (AutoencoderKLFlux2) in 2x2 patches of 128 channels, normalised by the
  autoencoder's batch-norm statistics with eps 1e-5 (the pipeline's constant: the published config's eps is not the
  trained one). The training grid stays (B, 32, h, w), the same normalisation per patch position, so masks and the
  noise-level draw see the autoencoder's grid. timestep = sigma x 1000, the velocity (noise - image) as output.

Its LoRAs train the blocks' attention (to_q, to_k, to_v, to_out.0) and MLP (gate_proj, up_proj, linear_fc2) layers,
OneTrainer's 'attn-mlp' preset. The files name them `diffusion_model.<diffusers module path>` with lora_A/lora_B,
the alpha folded in (FileNamedLora): ai-toolkit's naming, which diffusers' ErnieImageLoraLoaderMixin converts and
ComfyUI's generic `diffusion_model.<path>` keys load (ComfyUI's ERNIE-Image model has diffusers' module names).

Single files (ComfyUI's split files): the diffusion_models file (diffusers' names: reference.py), the Ministral 3
text encoder (text_encoder.py) and FLUX.2's autoencoder (flux2_autoencoder.py); a scaled fp8 transformer file is
read with each weight times its scale (ideogram4/scaled_fp8.py). Finetunes are written as the transformer's file.
"""
from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, LoraTarget, ModelFamily, ModelFiles, SizeConditioning
from trainers.models.ernie_image.rules import TRANSFORMER_CLASS, ErnieImageRules
from trainers.models.flow import FlowFamily, TextEncoderSpec, last_blocks, run_frozen
from trainers.models.flow_latents import pack_latents, unpack_latents
from trainers.models.lora_file_names import FileNamedLora, path_target

TEXT_LENGTH = 512  # OneTrainer's PROMPT_MAX_LENGTH (the pipeline cuts at the tokenizer's own maximum)
HIDDEN_LAYER = -2  # the pipeline's "second to last hidden state (matches training)"
BN_EPS = 1e-5  # the eps ErnieImagePipeline un-normalises latents with (its TODO: the hub config's is not it)
BLOCK_LAYERS = ("self_attention.to_q", "self_attention.to_k", "self_attention.to_v", "self_attention.to_out.0",
                "mlp.gate_proj", "mlp.up_proj", "mlp.linear_fc2")
# the module paths of its files: the blocks' (what it trains) and the other Linear layers ai-toolkit's files may hold
LORA_FILE_MODULES = re.compile(r"layers\.\d+\.(" + "|".join(re.escape(name) for name in BLOCK_LAYERS) + ")"
                               r"|text_proj|time_embedding\.linear_[12]|adaLN_modulation\.1|final_norm\.linear"
                               r"|final_linear")


class ErnieImage(FileNamedLora, ErnieImageRules, FlowFamily, ModelFamily):
    implementation = "https://huggingface.co/baidu/ERNIE-Image"
    native_size = 1024
    transformer_class = TRANSFORMER_CLASS
    vae_class = "AutoencoderKLFlux2"
    default_t5_length = TEXT_LENGTH
    fixed_settings = {"model_prediction_type": "raw", "guidance_scale": 0.0}  # no guidance embedding
    latent_scaling = (1.0, 0.0)  # unused: its latents are normalised by the autoencoder's batch-norm statistics
    text_encoder_specs = (TextEncoderSpec("Mistral3Model", "text_encoder", "auto", "tokenizer", "Ministral 3",
                                          max_length=TEXT_LENGTH),)
    pad_token_id: int = 0  # its tokenizer's, set when loaded
    lora_file_modules = LORA_FILE_MODULES

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        return _with_padding(super().load(folder, weight_dtype, vae_path, random_init))

    def load_checkpoint(self, ckpt: Any, weight_dtype: torch.dtype, vae_path: str, files: ModelFiles) -> Any:
        return _with_padding(super().load_checkpoint(ckpt, weight_dtype, vae_path, files))

    def denoiser_from_checkpoint(self, ckpt: Any, weight_dtype: torch.dtype) -> nn.Module:
        """The transformer of its file; a scaled fp8 one dequantized into the training dtype."""
        from trainers.models.ideogram4.scaled_fp8 import dequantized_checkpoint

        return super().denoiser_from_checkpoint(dequantized_checkpoint(ckpt, weight_dtype), weight_dtype)

    def to_checkpoint(self, model: LoadedModel, denoiser_state: Any) -> dict[str, torch.Tensor]:
        """The transformer alone, as ComfyUI's diffusion_models file holds it (diffusers' names)."""
        from trainers.models.ernie_image import reference

        return reference.to_reference(denoiser_state, {})

    def swap_blocks(self, denoiser: nn.Module, count: int) -> list[nn.Module]:
        return last_blocks(denoiser.layers, count, "layers")

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(Ministral 3's second-to-last hidden states, zero on the padding; the text mask), as ErnieImagePipeline
        encodes. The encoder reads the batch's longest caption, not every padding token."""
        (encoder,), (ids,) = text_encoders, input_ids
        mask = ids != self.pad_token_id
        longest = max(int(mask.sum(dim=1).max()), 1)
        hidden = run_frozen(encoder, lambda: encoder(input_ids=ids[:, :longest], attention_mask=mask[:, :longest],
                                                     output_hidden_states=True).hidden_states[HIDDEN_LAYER])
        hidden = torch.cat([hidden, hidden.new_zeros(ids.shape[0], ids.shape[1] - longest, hidden.shape[-1])], dim=1)
        return hidden * mask[..., None].to(hidden.dtype), mask.to(hidden.dtype)

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                text_mask: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """The velocity for latents (B, 32, h, w): patchified to (B, 128, h/2, w/2) as the transformer reads them,
        with each caption's states (cut after the batch's longest) and length, and back."""
        assert text_mask is not None, "ERNIE-Image's encode_prompts gives the text mask"
        lengths = text_mask.sum(dim=1).long().to(noisy.device)
        longest = max(int(lengths.max()), 1)
        out = unet(hidden_states=patchify(noisy), timestep=timesteps.to(noisy.dtype),
                   text_bth=hidden[:, :longest].to(noisy.device, noisy.dtype), text_lens=lengths,
                   return_dict=False)[0]
        return unpatchify(out)

    def vae_latents(self, raw: torch.Tensor, vae: nn.Module) -> torch.Tensor:
        mean, std = _patch_stats(vae, raw)
        return unpack_latents((pack_latents(raw) - mean) / std, raw.shape[-2], raw.shape[-1])

    # --- samples ---

    def scheduler_config(self) -> dict[str, Any]:
        """Its published sampling schedule: the pipeline's linear sigmas shifted by 4."""
        return {"shift": 4.0}

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        """ErnieImagePipeline without its prompt enhancer (an optional rewriting model: samples render the prompt as
        written)."""
        from diffusers import ErnieImagePipeline

        return ErnieImagePipeline(transformer=model.unet, vae=model.vae, text_encoder=model.text_encoders[0],
                                  tokenizer=model.tokenizers[0], scheduler=scheduler)

    def pipeline_embeds(self, hidden: torch.Tensor, text_mask: torch.Tensor | None) -> dict[str, Any]:
        """encode_prompts' (prompt, negative) rows as the pipeline's lists of each prompt's states without padding."""
        assert text_mask is not None, "ERNIE-Image's encode_prompts gives the text mask"
        rows = [states[keep.to(states.device).bool()] for states, keep in zip(hidden, text_mask)]
        return {"prompt_embeds": rows[:1], "negative_prompt_embeds": rows[1:]}

    def pipeline_kwargs(self, cfg_scale: float) -> dict[str, Any]:
        return {"guidance_scale": cfg_scale, "use_pe": False}

    def decode_latents(self, vae: nn.Module, latents: torch.Tensor, width: int, height: int) -> torch.Tensor:
        """Pixels of what the pipeline returns with output_type="latent": normalised 128-channel patches."""
        tokens = latents.flatten(2).transpose(1, 2)
        mean, std = _patch_stats(vae, tokens)
        grid = unpatchify((tokens * std + mean).transpose(1, 2).reshape(latents.shape))
        return vae.decode(grid.to(vae.device, vae.dtype)).sample

    def model_index(self) -> dict[str, Any]:
        """A saved folder's autoencoder class (the prompt enhancer, optional, is not part of it)."""
        return {"vae": ["diffusers", self.vae_class]}

    # --- LoRA ---

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        return {**super().lora_metadata(v_prediction), "modelspec.implementation": self.implementation,
                "modelspec.prediction_type": None, **self.flow_metadata()}

    def lora_for_pipeline(self, state: dict[str, torch.Tensor], model: Any) -> dict[str, torch.Tensor]:
        """A kohya-named file as load_lora_weights takes it: any Linear layer of the transformer, so that ai-toolkit's
        files (which train every Linear of it) render whole."""
        from trainers.models.flow_lora import kohya_to_diffusers

        every = [path_target(path, (module,)) for path, module in model.unet.named_modules()
                 if isinstance(module, nn.Linear)]
        return kohya_to_diffusers(state, model, every, (None,) * len(self.text_encoder_specs))

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        """The blocks' attention and MLP layers (OneTrainer's 'attn-mlp'), under diffusers' module paths."""
        return [path_target(f"layers.{i}.{name}", (layer.get_submodule(name),))
                for i, layer in enumerate(unet.layers) for name in BLOCK_LAYERS]


def _with_padding(model: Any) -> Any:
    """The loaded model with its tokenizer padding on the right and the family knowing its pad token."""
    (tokenizer,) = model.tokenizers
    tokenizer.padding_side = "right"  # the mask below counts a caption's tokens from the left
    if tokenizer.pad_token is None:  # padding a batch needs one (the pipeline never pads); its EOS is never
        tokenizer.pad_token = tokenizer.eos_token  # in a caption's tokens (only the BOS is added)
    family = copy.copy(model.family)
    family.pad_token_id = tokenizer.pad_token_id
    return dataclasses.replace(model, family=family)


def patchify(latents: torch.Tensor) -> torch.Tensor:
    """(B, C, h, w) -> (B, 4C, h/2, w/2), ErnieImagePipeline's _patchify_latents (channel c's 2x2 patch at 4c..4c+3)."""
    b, c, h, w = latents.shape
    patches = latents.reshape(b, c, h // 2, 2, w // 2, 2).permute(0, 1, 3, 5, 2, 4)
    return patches.reshape(b, c * 4, h // 2, w // 2)


def unpatchify(latents: torch.Tensor) -> torch.Tensor:
    """The inverse of patchify."""
    b, c, h, w = latents.shape
    patches = latents.reshape(b, c // 4, 2, 2, h, w).permute(0, 1, 4, 2, 5, 3)
    return patches.reshape(b, c // 4, h * 2, w * 2)


def _patch_stats(vae: nn.Module, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The autoencoder's batch-norm mean and std of the 128 patch channels (eps BN_EPS), to broadcast over tokens."""
    mean = vae.bn.running_mean.to(like.device, like.dtype)
    std = torch.sqrt(vae.bn.running_var + BN_EPS).to(like.device, like.dtype)
    return mean, std


ERNIE_IMAGE = ErnieImage()
