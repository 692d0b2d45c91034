"""Qwen-Image 2.1 (diffusers QwenImage21Transformer2DModel, QwenImage21Pipeline), trained as Qwen-Image is (its
latent statistics, timestep = sigma, the velocity as output, no guidance embedding, 'qwen_shift'), where it differs:
captions in its own chat template read by Qwen3-VL (the last decoder layer's states before the final norm, less the
system turn's tokens, without padding), one single-stream block-causal transformer over the joint text and image
sequence, its image tokens the 64-channel latents of a 16x autoencoder unpatched (plain spatial order), the shift's
mu linear from 0.5 at 256 to 1.15 at 4096 tokens. Its LoRAs train every linear layer of the blocks (their modulation is
one shared layer outside them) under Qwen-Image's kohya names (`lora_unet_transformer_blocks_0_img_mlp_gate_layer`); the
files name them by diffusers' module paths with kohya's weights and alphas
(`transformer_blocks.0.img_mlp.gate_layer.lora_down.weight`), the one naming both diffusers' load_lora_weights and
ComfyUI (which fuses gate_layer and proj) read for every module.
"""
from __future__ import annotations

import copy
import re
import types
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, LoraTarget, ModelFamily, SizeConditioning
from trainers.models.flow import TextEncoderSpec, run_frozen
from trainers.models.lora_file_names import FileNamedLora, path_target
from trainers.models.qwen_image.family import QwenImage, trimmed
from trainers.models.qwen_image21.rules import QwenImage21Rules

SYSTEM_PROMPT = "Comprehend and analyze the provided prompt."
SYSTEM_TURN = f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n"
# QwenImage21Pipeline's text-to-image prompt template (a raw string, not the processor's chat template)
CHAT_TEMPLATE = SYSTEM_TURN + "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
TEXT_LENGTH = 1024  # caption tokens read (the pipeline cuts none; Qwen-Image's length)


class QwenImage21(FileNamedLora, QwenImage21Rules, QwenImage, ModelFamily):
    implementation = "https://huggingface.co/Qwen/Qwen-Image-2.1"
    native_size = 1024
    transformer_class = "QwenImage21Transformer2DModel"
    vae_class = "AutoencoderKLQwenImage21"
    text_encoder_specs = (TextEncoderSpec("Qwen3VLForConditionalGeneration", "text_encoder", "auto", "processor",
                                          "Qwen3-VL", max_length=TEXT_LENGTH, template=CHAT_TEMPLATE),)
    shift_mu = (0.5, 1.15)  # QwenImage21Pipeline's calculate_shift defaults, over its unpatched latent tokens
    shift_tokens = (256, 4096)
    system_tokens: int = 0  # the system turn's tokens, dropped from the text states; set when loaded
    lora_file_prefix = ""  # diffusers' module paths as they are
    lora_file_peft = False
    lora_file_modules = re.compile(r"transformer_blocks\.\d+\.[\w.]+")  # lora_targets' paths

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        """Its tokenizer from `processor/` (a diffusers folder) or `tokenizer/` (a finetune Atelier saved)."""
        clone = copy.copy(self)
        spec = self.text_encoder_specs[0]
        subfolder = spec.tokenizer_subfolder if (folder / spec.tokenizer_subfolder).is_dir() else "tokenizer"
        clone.text_encoder_specs = (replace(spec, tokenizer_subfolder=subfolder),)
        model = QwenImage.load(clone, folder, weight_dtype, vae_path, random_init)
        tokenizer = model.tokenizers[0]
        tokenizer.padding_side = "right"  # encode_prompts reads each caption's states from the start
        model.family.system_tokens = len(tokenizer(SYSTEM_TURN).input_ids)
        encode_opaque(model.vae)
        return model

    def to_checkpoint(self, model: LoadedModel, denoiser_state: Any) -> dict[str, torch.Tensor]:
        raise NotImplementedError(f"{self.title} finetunes are saved as diffusers folders")

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(Qwen3-VL's last decoder layer's states, before its final norm, after the system turn, zero on the
        padding; the text mask), as QwenImage21Pipeline encodes a prompt without condition images."""
        (qwen,), (ids,) = text_encoders, input_ids
        mask = ids != self.pad_token_id
        longest = int(mask.sum(dim=1).max())
        language = qwen.model.language_model
        # the norm's input is what the transformer was trained on (the pipeline's forward hook does the same)
        handle = language.norm.register_forward_hook(lambda module, args, output: args[0])
        try:
            hidden = run_frozen(qwen, lambda: qwen.model(input_ids=ids[:, :longest], attention_mask=mask[:, :longest]
                                                         ).last_hidden_state)
        finally:
            handle.remove()
        hidden = torch.cat([hidden, hidden.new_zeros(ids.shape[0], ids.shape[1] - longest, hidden.shape[-1])], dim=1)
        mask = mask[:, self.system_tokens:]
        return hidden[:, self.system_tokens:] * mask[..., None].to(hidden.dtype), mask.to(hidden.dtype)

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                text_mask: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """The velocity for latents (B, C, h, w): each latent one token, after the caption's (cut after the batch's
        longest); the joint sequence's image slots stand for 2x2 tokens each; its output's image tokens are last."""
        batch, channels, height, width = noisy.shape
        hidden, text_mask = trimmed(hidden, text_mask)
        slots = torch.cat([torch.zeros_like(text_mask, dtype=torch.bool),
                           torch.ones(batch, height * width // 4, dtype=torch.bool, device=text_mask.device)], dim=1)
        out = unet(hidden_states=noisy.flatten(2).transpose(1, 2), encoder_hidden_states=hidden.to(noisy.dtype),
                   encoder_hidden_states_mask=text_mask.bool().to(noisy.device),
                   timestep=timesteps.to(noisy.dtype) / 1000, img_shapes=[[(1, height, width)]] * batch,
                   img_mask=slots.to(noisy.device), return_dict=False)[0][:, -height * width:]
        return out.transpose(1, 2).reshape(batch, channels, height, width)

    def image_tokens(self, height: int, width: int) -> int:
        return height * width

    def decode_latents(self, vae: nn.Module, latents: torch.Tensor, width: int, height: int) -> torch.Tensor:
        """The colour channels of what its autoencoder decodes (the published one decodes RGBA)."""
        return super().decode_latents(vae, latents, width, height)[:, :3]

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        return [path_target(f"transformer_blocks.{i}.{name}", (module,))
                for i, block in enumerate(unet.transformer_blocks)
                for name, module in block.named_modules() if isinstance(module, nn.Linear)]

    # --- samples ---

    def scheduler_config(self) -> dict[str, Any]:
        return {"shift": 1.0, "use_dynamic_shifting": True, "base_shift": 0.5, "max_shift": 1.15,
                "base_image_seq_len": 256, "max_image_seq_len": 4096, "time_shift_type": "exponential"}

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        from diffusers import QwenImage21Pipeline

        return QwenImage21Pipeline(scheduler=scheduler, vae=model.vae, text_encoder=model.text_encoders[0],
                                   processor=PromptProcessor(model.tokenizers[0]), transformer=model.unet)

    def latent_grid(self, latents: torch.Tensor, vae: nn.Module, width: int, height: int) -> torch.Tensor:
        """The pipeline's latents (B, h x w, C), one token per latent, as (B, C, h, w)."""
        scale = vae.config.scale_factor_spatial
        return latents.transpose(1, 2).reshape(latents.shape[0], latents.shape[2], height // scale, width // scale)


def pixel_channels(vae: nn.Module) -> int:
    """The image channels the autoencoder reads: its input's, less the patching (the published one: 4, RGBA)."""
    return vae.config.in_channels // (vae.config.patch_size or 1) ** 2


def encode_opaque(vae: nn.Module) -> None:
    """Make the autoencoder encode RGB images (B, 3, H, W) in [-1, 1] as the pipeline gives it RGBA ones: with an
    opaque alpha channel (1) added when it reads four channels (the instance's method: the saved model is unchanged)."""
    encode_rgba = vae.encode

    def encode(self: nn.Module, pixels: torch.Tensor, return_dict: bool = True) -> Any:
        missing = pixel_channels(self) - pixels.shape[1]
        if missing > 0:
            pixels = torch.cat([pixels, pixels.new_ones(pixels.shape[0], missing, *pixels.shape[2:])], dim=1)
        return encode_rgba(pixels, return_dict=return_dict)

    vae.encode = types.MethodType(encode, vae)


class PromptProcessor:
    """What QwenImage21Pipeline asks of its Qwen3VLProcessor for text prompts (its tokenizer, the system turn's
    tokens), without Qwen3-VL's image and video processors (torchvision): images are not conditions here."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def apply_chat_template(self, messages: list[dict[str, Any]], tokenize: bool = True,
                            return_dict: bool = False) -> list[list[int]]:
        turns = "".join(f"<|im_start|>{m['role']}\n{''.join(c['text'] for c in m['content'])}<|im_end|>\n"
                        for m in messages)
        return [self.tokenizer(turns).input_ids]

    def __call__(self, text: list[str], images: Any = None, **kwargs: Any) -> Any:
        if images:
            raise ValueError("Qwen-Image 2.1 condition images need Qwen3VLProcessor; Atelier renders text prompts")
        return self.tokenizer(text, **kwargs)


QWEN_IMAGE21 = QwenImage21()
