"""Ideogram 4 (diffusers Ideogram4Transformer2DModel, Ideogram4Pipeline), as its pipeline runs it and musubi-tuner
trains it:

- captions in Qwen3-VL's chat template (a user turn, then the generation prompt), left-padded to 512 tokens, read by
  the Qwen3VLModel's decoder layers with positions counted from the first real token; the hidden states of layers
  0, 3, ..., 33 and 35 concatenated per token (13 x 4096 = 53,248 features), zero on the padding.
- latents of FLUX.2's 32-channel autoencoder (AutoencoderKLFlux2) in 2x2 patches of 128 channels ordered (patch row,
  patch column, channel), normalised by the autoencoder's batch-norm statistics; the training grid stays
  (B, 32, h, w) (sequence.py packs it), so masks and the noise-level draw see the VAE's grid.
- one packed sequence [text][image] per sample with MRoPE positions (the image's offset by 65,536) and a segment mask;
  the transformer's time is 1 - sigma (0 is noise) and its output the negated velocity (its pipeline steps with -v):
  denoise gives the velocity, as every flow family here.
- timestep_sampling 'ideogram4_shift' (musubi-tuner's default for it): sigma = sigmoid(mu + 1.5 z), mu = half the log
  of the image's pixels over 512 x 512, clamped to the pipeline's log-SNR range [-15, 18].

Samples: the pipeline steps a conditional and an unconditional transformer (asymmetric guidance); a LoRA trains the
conditional one only, so samples render as musubi-tuner's LoRA sampling does by default: the trained transformer for
both branches, the unconditional one reading the negative prompt (pipeline.py).

LoRA files (musubi-tuner's networks.lora_ideogram4 modules: attention.qkv (q, k and v as one module), attention.o,
feed_forward.w1/w2/w3 of each block) name the modules `diffusion_model.<reference path>` with kohya's
lora_down/lora_up/alpha: what Ideogram4Pipeline.load_lora_weights converts (its
_convert_non_diffusers_ideogram4_lora_to_diffusers) and ComfyUI's `diffusion_model.<path>` keys load (its model has
Comfy-Org's reference names); musubi-tuner's own files (`lora_unet_layers_0_attention_qkv`) are read as they are.

Single files (Comfy-Org's split files): the conditional transformer (reference.py; its scaled fp8 file read with each
weight times its scale, scaled_fp8.py), Qwen3-VL's language model (text_encoder.py) and FLUX.2's autoencoder
(ernie_image/flux2_autoencoder.py). Finetunes are written as the conditional transformer's file, unquantized.
"""
from __future__ import annotations

import copy
import math
import re
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.data.prompt_chunks import PromptTruncated
from trainers.models.base import LoadedModel, LoraTarget, ModelFamily, ModelFiles, SizeConditioning
from trainers.models.flow import FlowFamily, TextEncoderSpec, last_blocks, run_frozen
from trainers.models.ideogram4.rules import Ideogram4Rules
from trainers.models.ideogram4.sequence import image_positions, packed, patchify, trimmed, unpatchify
from trainers.models.lora_file_names import FileNamedLora

TEXT_LENGTH = 512
UNCONDITIONAL = "unconditional_transformer"
MARK = "\x00caption\x00"  # stands for the caption while the chat template is rendered
TEXT_LAYERS = (0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 35)  # the pipeline's QWEN3_VL_ACTIVATION_LAYERS
SHIFT_STD = 1.5  # the pipeline's and musubi-tuner's logit-normal std
LOGSNR_RANGE = (-15.0, 18.0)  # the pipeline's clamp of the schedule
LORA_FILE_MODULES = re.compile(r"layers\.\d+\.(attention\.(qkv|o)|feed_forward\.w[123])")


class Ideogram4(FileNamedLora, Ideogram4Rules, FlowFamily, ModelFamily):
    implementation = "https://huggingface.co/Comfy-Org/Ideogram-4"  # musubi-tuner's IMPL_IDEOGRAM4
    native_size = 1024
    transformer_class = "Ideogram4Transformer2DModel"
    vae_class = "AutoencoderKLFlux2"
    default_t5_length = TEXT_LENGTH
    fixed_settings = {"model_prediction_type": "raw", "guidance_scale": 1.0}  # no guidance embedding
    latent_scaling = (1.0, 0.0)  # unused: its latents are normalised by the autoencoder's batch-norm statistics
    text_encoder_specs = (TextEncoderSpec("Qwen3VLModel", "text_encoder", "auto", "tokenizer", "Qwen3-VL",
                                          max_length=TEXT_LENGTH),)
    lora_file_modules = LORA_FILE_MODULES
    lora_file_peft = False  # kohya's weight names and alpha: diffusers' conversion and ComfyUI read both
    pad_token_id: int = 0  # its tokenizer's, set when loaded
    unconditional_folder: Path | None = None  # the loaded folder's unconditional transformer, kept by saved folders

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        model = FlowFamily.load(self, folder, weight_dtype, vae_path, random_init)
        family = model.family.with_tokenizer(model.tokenizers[0])
        unconditional = Path(folder) / UNCONDITIONAL
        family.unconditional_folder = unconditional if unconditional.is_dir() else None
        return replace(model, family=family)

    def load_checkpoint(self, ckpt: Any, weight_dtype: torch.dtype, vae_path: str, files: ModelFiles) -> Any:
        """Comfy-Org's split files: the conditional transformer (its unconditional one is not read: samples run the
        trained one for both branches), Qwen3-VL and FLUX.2's autoencoder."""
        model = FlowFamily.load_checkpoint(self, ckpt, weight_dtype, vae_path, files)
        return replace(model, family=model.family.with_tokenizer(model.tokenizers[0]))

    def denoiser_from_checkpoint(self, ckpt: Any, weight_dtype: torch.dtype) -> nn.Module:
        """The transformer of its file; a scaled fp8 one (Comfy-Org's) dequantized into the training dtype."""
        from trainers.models.ideogram4.scaled_fp8 import dequantized_checkpoint

        return FlowFamily.denoiser_from_checkpoint(self, dequantized_checkpoint(ckpt, weight_dtype), weight_dtype)

    def to_checkpoint(self, model: LoadedModel, denoiser_state: Any) -> dict[str, torch.Tensor]:
        """The conditional transformer alone in Comfy-Org's layout (reference.py), unquantized."""
        from accelerate.utils import extract_model_from_parallel

        from trainers.models.ideogram4 import reference

        return reference.to_reference(denoiser_state, extract_model_from_parallel(model.unet).config)

    def with_tokenizer(self, tokenizer: Any) -> "Ideogram4":
        """A copy whose prompt template is the chat template around a caption, as the pipeline renders it; the
        tokenizer pads on the left, as the pipeline lays the text out."""
        messages = [{"role": "user", "content": [{"type": "text", "text": MARK}]}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        tokenizer.padding_side = "left"
        clone = copy.copy(self)
        template = text.replace("{", "{{").replace("}", "}}").replace(MARK, "{}")
        clone.text_encoder_specs = (replace(self.text_encoder_specs[0], template=template),)
        clone.pad_token_id = tokenizer.pad_token_id
        return clone

    def swap_blocks(self, denoiser: nn.Module, count: int) -> list[nn.Module]:
        """The last of its 34 blocks (musubi-tuner swaps at most 33)."""
        return last_blocks(denoiser.layers, count, "blocks")

    # --- text ---

    def tokenize(self, tokenizers: list[Any], captions: list[str], fmt: Any = None) -> list[torch.Tensor]:
        """Ids (B, 512) of each caption in the chat template, left-padded; a longer caption is cut to the room the
        template leaves (a PromptTruncated warning names it), so that the generation prompt after it stays (the
        pipeline refuses such a prompt instead)."""
        spec, (tokenizer,) = self.text_encoder_specs[0], tokenizers
        room = self._room(spec, tokenizer)
        fitted = []
        encoded = tokenizer(captions, add_special_tokens=False, return_offsets_mapping=True)
        for caption, ids, offsets in zip(captions, encoded.input_ids, encoded.offset_mapping):
            if len(ids) > room:
                warnings.warn(PromptTruncated(f"a caption has more than {room} {spec.what} tokens and is cut there "
                                              f"({self.title} reads {self.text_length(spec)} with its chat "
                                              f"template): {caption[:200]!r}"), stacklevel=2)
                caption = caption[:offsets[room - 1][1]]  # the text of its first `room` tokens
            fitted.append(caption)
        return FlowFamily.tokenize(self, tokenizers, fitted, fmt)

    def overlong(self, tokenizers: list[Any], captions: list[str], fmt: Any) -> list[str]:
        (tokenizer,) = tokenizers
        room = self._room(self.text_encoder_specs[0], tokenizer)
        return [c for c, ids in zip(captions, tokenizer(captions, add_special_tokens=False).input_ids)
                if len(ids) > room]

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(the 13 tapped layers' hidden states concatenated per token, zero on the padding: (B, L, 13 x D); the
        text mask (B, L)), as Ideogram4Pipeline.encode_prompt gives its text features."""
        from diffusers import Ideogram4Pipeline

        (encoder,), (ids,) = text_encoders, input_ids
        mask = (ids != self.pad_token_id).long()
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0) * mask
        taps = run_frozen(encoder, lambda: Ideogram4Pipeline._get_text_encoder_hidden_states(
            encoder, ids, mask, positions))
        features = torch.stack(taps, dim=0).permute(1, 2, 3, 0).reshape(ids.shape[0], ids.shape[1], -1)
        return features * mask.unsqueeze(-1).to(features.dtype), mask.to(features.dtype)

    # --- training ---

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                text_mask: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """The velocity for latents (B, 32, h, w): the text (its common padding trimmed) then the 2x2 patches as one
        sequence, the transformer's output for the image tokens negated and put back on the grid."""
        assert text_mask is not None, "Ideogram 4's encode_prompts gives the text mask"
        batch, _, height, width = noisy.shape
        text, mask = trimmed(hidden.to(noisy.dtype), text_mask.to(noisy.device))
        tokens = patchify(noisy)
        inputs = packed(text, mask, tokens, image_positions(height // 2, width // 2, batch, noisy.device))
        time = (1.0 - timesteps.float() / 1000).to(noisy.dtype)
        out = unet(**inputs, timestep=time, return_dict=False)[0]
        return -unpatchify(out[:, -tokens.shape[1]:], height, width)

    def draw_sigmas(self, normal: torch.Tensor, uniform: torch.Tensor, latent_size: tuple[int, int],
                    min_timestep: int | None, max_timestep: int | None) -> torch.Tensor:
        """timestep_sampling 'ideogram4_shift' (musubi-tuner's): a logit-normal of std 1.5 centred at half the log of
        the image's pixels over 512 x 512 (8 pixels a latent), clamped as the pipeline's schedule; the others as
        every family."""
        if self.settings.timestep_sampling != "ideogram4_shift":
            return FlowFamily.draw_sigmas(self, normal, uniform, latent_size, min_timestep, max_timestep)
        return ideogram4_sigmas(normal, latent_size[0] * 8 * latent_size[1] * 8)

    def vae_latents(self, raw: torch.Tensor, vae: nn.Module) -> torch.Tensor:
        mean, std = _patch_stats(vae, raw)
        return unpatchify((patchify(raw) - mean) / std, raw.shape[-2], raw.shape[-1])

    # --- samples ---

    def scheduler_config(self) -> dict[str, Any]:
        return {"shift": 1.0}  # the pipeline sets its own sigmas

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        from trainers.models.ideogram4.pipeline import embeds_pipeline

        return embeds_pipeline(model, scheduler)

    def pipeline_embeds(self, hidden: torch.Tensor, text_mask: torch.Tensor | None) -> dict[str, Any]:
        assert text_mask is not None, "Ideogram 4's encode_prompts gives the text mask"
        return {"prompt_embeds": hidden[:1], "prompt_mask": text_mask[:1],
                "negative_prompt_embeds": hidden[1:], "negative_prompt_mask": text_mask[1:]}

    def pipeline_kwargs(self, cfg_scale: float) -> dict[str, Any]:
        """A constant guidance scale (the pipeline's default is a 48-step schedule of 7, then 3)."""
        return {"guidance_scale": cfg_scale, "guidance_schedule": None}

    def decode_latents(self, vae: nn.Module, latents: torch.Tensor, width: int, height: int) -> torch.Tensor:
        """Pixels of what the pipeline returns with output_type="latent": its normalised patch tokens."""
        scale = 2 ** (len(vae.config.block_out_channels) - 1)
        mean, std = _patch_stats(vae, latents)
        grid = unpatchify(latents * std + mean, 2 * (height // (2 * scale)), 2 * (width // (2 * scale)))
        return vae.decode(grid.to(vae.device, vae.dtype)).sample

    def model_index(self) -> dict[str, Any]:
        return {"vae": ["diffusers", self.vae_class]}

    def kept_components(self) -> dict[str, tuple[Path, list[str]]]:
        """The unconditional transformer (never trained: LoRAs and finetunes train the conditional one), copied into
        a saved folder so that Ideogram4Pipeline.from_pretrained loads it."""
        if self.unconditional_folder is None:
            return {}
        return {UNCONDITIONAL: (self.unconditional_folder, ["diffusers", self.transformer_class])}

    # --- LoRA ---

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        return {**super().lora_metadata(v_prediction), "modelspec.implementation": self.implementation,
                "modelspec.prediction_type": None, "ss_network_module": "networks.lora_ideogram4",
                **self.flow_metadata()}

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        """musubi-tuner's modules under its (Comfy-Org's) names: attention.qkv (to_q, to_k, to_v fused),
        attention.o (to_out.0), feed_forward.w1/w2/w3 of every block; the modulations stay frozen."""
        targets = []
        for i, block in enumerate(unet.layers):
            attn, ff = block.attention, block.feed_forward
            for path, layers in (("attention.qkv", (attn.to_q, attn.to_k, attn.to_v)),
                                 ("attention.o", (attn.to_out[0],)), ("feed_forward.w1", (ff.w1,)),
                                 ("feed_forward.w2", (ff.w2,)), ("feed_forward.w3", (ff.w3,))):
                full = f"layers.{i}.{path}"
                targets.append(LoraTarget("lora_unet_" + full.replace(".", "_"), layers, path=full))
        return targets


def ideogram4_sigmas(normal: torch.Tensor, pixels: int) -> torch.Tensor:
    """musubi-tuner's compute_ideogram4_shift_timestep from a standard normal draw, for an image of `pixels`."""
    mu = 0.5 * math.log(pixels / (512 * 512))
    t_min, t_max = (1.0 / (1.0 + math.exp(0.5 * bound)) for bound in LOGSNR_RANGE[::-1])  # the model's time
    return torch.sigmoid(mu + SHIFT_STD * normal.double()).clamp(1.0 - t_max, 1.0 - t_min).to(normal.dtype)


def _patch_stats(vae: nn.Module, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The autoencoder's batch-norm mean and std of the 128 patch channels, shaped to broadcast over tokens."""
    mean = vae.bn.running_mean.to(like.device, like.dtype)
    std = torch.sqrt(vae.bn.running_var + vae.config.batch_norm_eps).to(like.device, like.dtype)
    return mean, std


IDEOGRAM4 = Ideogram4()
