"""Qwen-Image (diffusers QwenImageTransformer2DModel, QwenImagePipeline), as musubi-tuner trains it: captions in the
pipeline's chat template read by Qwen2.5-VL (its last hidden states less the template's 34 system tokens, without
padding), a dual-stream transformer over 2x2-packed latents of its own autoencoder (AutoencoderKLQwenImage, one frame,
latents normalised by per-channel mean and std), timestep = sigma, the velocity as output, no guidance embedding.
Its LoRA files use musubi-tuner's names, which are ComfyUI's (`lora_unet_transformer_blocks_0_attn_to_q`: diffusers'
module names), on every linear layer of the blocks but their modulations (musubi's lora_qwen_image).
"""
from __future__ import annotations

import copy
import math
import types
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, LoraTarget, ModelFamily, ModelFiles, SizeConditioning
from trainers.models.flow import FlowFamily, TextEncoderSpec, run_frozen
from trainers.models.flow_latents import pack_latents, packed_grid, unpack_latents
from trainers.models.flow_sigmas import shifted
from trainers.models.qwen_image.rules import QwenImageRules

# QwenImagePipeline's prompt_template_encode, the system tokens it drops, and its tokenizer_max_length
CHAT_TEMPLATE = ("<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, "
                 "text, spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}"
                 "<|im_end|>\n<|im_start|>assistant\n")
TEMPLATE_TOKENS = 34
TEXT_LENGTH = 1024
QWEN_SHIFT_MU = (0.5, 0.9)  # its scheduler's base_shift and max_shift (at 256 and 8192 packed tokens)


class QwenImage(QwenImageRules, FlowFamily, ModelFamily):
    implementation = "https://github.com/QwenLM/Qwen-Image"
    native_size = 1328
    transformer_class = "QwenImageTransformer2DModel"
    vae_class = "AutoencoderKLQwenImage"
    default_t5_length = TEXT_LENGTH
    fixed_settings = {"model_prediction_type": "raw", "guidance_scale": 0.0}  # no guidance embedding
    lora_network_module = "networks.lora_qwen_image"  # ss_network_module of its LoRAs
    text_encoder_specs = (TextEncoderSpec("Qwen2_5_VLForConditionalGeneration", "text_encoder", "auto", "tokenizer",
                                          "Qwen2.5-VL", max_length=TEXT_LENGTH + TEMPLATE_TOKENS,
                                          template=CHAT_TEMPLATE),)

    pad_token_id: int = 0  # its tokenizer's, set when loaded (the text encoder's config may not name it)
    template_tokens = TEMPLATE_TOKENS  # the template's system tokens its pipeline drops
    shift_mu = QWEN_SHIFT_MU  # timestep_sampling 'qwen_shift': mu at the fewest and most image tokens
    shift_tokens = (256, 8192)

    latent_scaling = (1.0, 0.0)  # unused: its autoencoder normalises by the published per-channel statistics

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        return _ready(super().load(folder, weight_dtype, vae_path, random_init))

    def load_checkpoint(self, ckpt: Any, weight_dtype: torch.dtype, vae_path: str, files: ModelFiles) -> Any:
        """ComfyUI's split files: the diffusion_models file, text_encoder's Qwen2.5-VL and ae's autoencoder
        (parts.py), the tokenizer from tokenizer_cache_dir (Qwen/Qwen-Image's)."""
        return _ready(super().load_checkpoint(ckpt, weight_dtype, vae_path, files))

    def to_checkpoint(self, model: LoadedModel, denoiser_state: Any) -> dict[str, torch.Tensor]:
        """The transformer alone as ComfyUI's and musubi-tuner's diffusion_models file holds it: diffusers' names."""
        return dict(denoiser_state)

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(Qwen2.5-VL's last hidden states after the template's system tokens, zero on the padding; the text mask),
        as QwenImagePipeline encodes. The encoder reads the batch's longest caption, not every padding token."""
        (qwen,), (ids,) = text_encoders, input_ids
        ids, vision = self.with_images(ids)
        mask = ids != self.pad_token_id
        longest = int(mask.sum(dim=1).max())
        # the language model alone: its last hidden states are the whole model's, without the vocabulary's logits
        hidden = run_frozen(qwen, lambda: qwen.model(input_ids=ids[:, :longest], attention_mask=mask[:, :longest],
                                                     **vision).last_hidden_state)
        hidden = torch.cat([hidden, hidden.new_zeros(ids.shape[0], ids.shape[1] - longest, hidden.shape[-1])], dim=1)
        mask = mask[:, self.template_tokens:]
        return hidden[:, self.template_tokens:] * mask[..., None].to(hidden.dtype), mask.to(hidden.dtype)

    def with_images(self, ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The ids and the vision inputs of the images the text encoder reads with them (Qwen-Image-Edit's input
        image); Qwen-Image reads none."""
        return ids, {}

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                text_mask: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """The velocity for latents (B, C, h, w): packed into (h/2 x w/2) tokens of C x 4, the text cut after the
        batch's longest caption (the rest is padding the transformer masks)."""
        batch, _, height, width = noisy.shape
        hidden, text_mask = trimmed(hidden, text_mask)
        own, references = pack_latents(noisy), self.reference_latents()
        shapes = [(1, height // 2, width // 2)] + [(1, r.shape[-2] // 2, r.shape[-1] // 2) for r in references]
        tokens = torch.cat([own, *(pack_latents(r.to(noisy.dtype)) for r in references)], dim=1)
        out = unet(hidden_states=tokens, encoder_hidden_states=hidden.to(noisy.dtype),
                   encoder_hidden_states_mask=text_mask.to(noisy.device), timestep=timesteps.to(noisy.dtype) / 1000,
                   img_shapes=[shapes] * batch, return_dict=False)[0]
        return unpack_latents(out[:, :own.shape[1]], height, width)

    def reference_latents(self) -> list[torch.Tensor]:
        """Latents (B, C, h, w) whose tokens follow the noisy ones, each with its own img_shapes entry, their output
        dropped (Qwen-Image-Edit's input image); Qwen-Image has none."""
        return []

    def draw_sigmas(self, normal: torch.Tensor, uniform: torch.Tensor, latent_size: tuple[int, int],
                    min_timestep: int | None, max_timestep: int | None) -> torch.Tensor:
        """timestep_sampling 'qwen_shift' (musubi-tuner's): 'sigmoid', shifted by e^mu with mu linear in the image's
        tokens (shift_mu at shift_tokens: 0.5 at 256 to 0.9 at 8192 packed tokens for Qwen-Image), as its pipeline
        samples; the others as every family."""
        if self.settings.timestep_sampling != "qwen_shift":
            return super().draw_sigmas(normal, uniform, latent_size, min_timestep, max_timestep)
        (low, high), (fewest, most) = self.shift_mu, self.shift_tokens
        mu = low + (high - low) * (self.image_tokens(*latent_size) - fewest) / (most - fewest)
        return shifted(torch.sigmoid(self.settings.sigmoid_scale * normal), math.exp(mu))

    def image_tokens(self, height: int, width: int) -> int:
        """The transformer's image tokens for a latent grid (height, width): 2x2 latents each."""
        return (height // 2) * (width // 2)

    def vae_latents(self, raw: torch.Tensor, vae: nn.Module) -> torch.Tensor:
        mean, std = _latent_stats(vae, raw)
        return (raw - mean) / std

    # --- samples ---

    def scheduler_config(self) -> dict[str, Any]:
        """Qwen-Image's published sampling schedule (its diffusers scheduler config)."""
        return {"shift": 1.0, "use_dynamic_shifting": True, "base_shift": 0.5, "max_shift": 0.9,
                "base_image_seq_len": 256, "max_image_seq_len": 8192, "shift_terminal": 0.02,
                "time_shift_type": "exponential"}

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        from diffusers import QwenImagePipeline

        return QwenImagePipeline(scheduler=scheduler, vae=model.vae, text_encoder=model.text_encoders[0],
                                 tokenizer=model.tokenizers[0], transformer=model.unet)

    def pipeline_embeds(self, hidden: torch.Tensor, text_mask: torch.Tensor | None) -> dict[str, Any]:
        hidden, text_mask = trimmed(hidden, text_mask)
        return {"prompt_embeds": hidden[:1], "prompt_embeds_mask": text_mask[:1],
                "negative_prompt_embeds": hidden[1:], "negative_prompt_embeds_mask": text_mask[1:]}

    def pipeline_kwargs(self, cfg_scale: float) -> dict[str, Any]:
        return {"true_cfg_scale": cfg_scale}

    def latent_grid(self, latents: torch.Tensor, vae: nn.Module, width: int, height: int) -> torch.Tensor:
        return packed_grid(latents, 2 ** len(vae.temperal_downsample), width, height)

    def decode_latents(self, vae: nn.Module, latents: torch.Tensor, width: int, height: int) -> torch.Tensor:
        grid = self.latent_grid(latents, vae, width, height).to(vae.device, vae.dtype)
        mean, std = _latent_stats(vae, grid)
        return vae.decode((grid * std + mean).unsqueeze(2)).sample[:, :, 0]

    # --- LoRA ---

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        return {**super().lora_metadata(v_prediction), "modelspec.implementation": self.implementation,
                "modelspec.prediction_type": None, "ss_network_module": self.lora_network_module,
                **self.flow_metadata()}

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        return [target for i, block in enumerate(unet.transformer_blocks) for target in _block_targets(i, block)]


def _ready(model: LoadedModel) -> LoadedModel:
    """`model` with its autoencoder encoding single frames and a copy of its family that knows its tokenizer's pad
    token (the text mask's; the text encoder's config may not name it)."""
    encode_single_frames(model.vae)
    family = copy.copy(model.family)
    family.pad_token_id = model.tokenizers[0].pad_token_id
    return replace(model, family=family)


def encode_single_frames(vae: nn.Module) -> None:
    """Make the video-shaped autoencoder encode images (B, C, H, W) as one frame, its distribution (B, C, h, w): what
    the trainer's latent caches read (the instance's method: the saved model is unchanged)."""
    from diffusers.models.autoencoders.autoencoder_kl import AutoencoderKLOutput
    from diffusers.models.autoencoders.vae import DiagonalGaussianDistribution

    encode_video = vae.encode

    def encode(self: nn.Module, pixels: torch.Tensor, return_dict: bool = True) -> Any:
        if pixels.ndim == 5:
            return encode_video(pixels, return_dict=return_dict)
        dist = encode_video(pixels.unsqueeze(2)).latent_dist
        image = DiagonalGaussianDistribution(dist.parameters.squeeze(2))
        return AutoencoderKLOutput(latent_dist=image) if return_dict else (image,)

    vae.encode = types.MethodType(encode, vae)


def _latent_stats(vae: nn.Module, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The autoencoder's per-channel latent mean and std, shaped (1, C, 1, 1) like `like`."""
    shape = (1, vae.config.z_dim, 1, 1)
    mean = torch.tensor(vae.config.latents_mean).view(shape).to(like.device, like.dtype)
    std = torch.tensor(vae.config.latents_std).view(shape).to(like.device, like.dtype)
    return mean, std


def trimmed(hidden: torch.Tensor, text_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The text states and mask up to the longest caption's last token (what follows is padding for every row)."""
    assert text_mask is not None, "Qwen-Image's encode_prompts gives the text mask"
    longest = max(int(text_mask.sum(dim=1).max()), 1)
    return hidden[:, :longest], text_mask[:, :longest]


def _block_targets(index: int, block: nn.Module) -> list[LoraTarget]:
    """A block's linear layers under musubi-tuner's (and ComfyUI's) names, its modulations (img_mod, txt_mod) left
    out as musubi's lora_qwen_image does."""
    prefix = f"lora_unet_transformer_blocks_{index}_"
    return [LoraTarget(prefix + name.replace(".", "_"), (module,)) for name, module in block.named_modules()
            if isinstance(module, nn.Linear) and not name.startswith(("img_mod", "txt_mod"))]


QWEN_IMAGE = QwenImage()
