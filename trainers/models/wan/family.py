"""Wan 2.1 text-to-video (diffusers WanTransformer3DModel, WanPipeline), as musubi-tuner trains it: captions read by
UMT5-XXL (its last hidden states at 512 tokens, zero after each caption's tokens, as WanPipeline encodes), a
transformer over 1x2x2 patches of the causal 3D autoencoder's latents (B, 16, F, h, w) (AutoencoderKLWan: 1 + 4k
frames to 1 + k latent frames, 8x smaller sides, latents normalised by its per-channel mean and std), timestep
= 1000 x sigma, the velocity (noise - latents) as its output, no guidance embedding. Images train as 1-frame clips.
Its LoRA files use musubi-tuner's names, which ComfyUI reads (`lora_unet_blocks_0_self_attn_q`: Wan-AI's module
names), on the blocks' attention and feed-forward linears (musubi's lora_wan leaves norms and modulations out).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, LoraTarget, ModelFamily, SizeConditioning
from trainers.models.flow import FlowFamily, TextEncoderSpec, last_blocks, run_frozen
from trainers.models.video import VideoFamily, encode_images_as_frames
from trainers.models.wan.rules import WanRules

TEXT_LENGTH = 512  # WanPipeline's max_sequence_length (musubi-tuner's too)
# diffusers' block modules -> Wan-AI's (musubi-tuner's and ComfyUI's names)
ATTENTIONS = {"attn1": "self_attn", "attn2": "cross_attn"}
PROJECTIONS = {"to_q": "q", "to_k": "k", "to_v": "v", "to_out.0": "o"}
FFN = {"ffn.net.0.proj": "ffn_0", "ffn.net.2": "ffn_2"}


class Wan(WanRules, VideoFamily, FlowFamily, ModelFamily):
    implementation = "https://github.com/Wan-Video/Wan2.1"
    native_size = 480  # its sampling size is 832x480 (832 wide)
    vae_class = "AutoencoderKLWan"
    default_t5_length = TEXT_LENGTH
    fixed_settings = {"model_prediction_type": "raw", "guidance_scale": 0.0}  # no guidance embedding
    text_encoder_specs = (TextEncoderSpec("UMT5EncoderModel", "text_encoder", "t5", "tokenizer", "UMT5",
                                          max_length=TEXT_LENGTH),)
    latent_scaling = (1.0, 0.0)  # unused: its autoencoder normalises by the published per-channel statistics

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        model = super().load(folder, weight_dtype, vae_path, random_init)
        encode_images_as_frames(model.vae)
        return model

    def swap_blocks(self, denoiser: nn.Module, count: int) -> list[nn.Module]:
        return last_blocks(denoiser.blocks, count, "blocks")

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(UMT5's last hidden states, zero after each caption's tokens; the text mask), as WanPipeline encodes."""
        (umt5,), (ids,) = text_encoders, input_ids
        mask = ids != umt5.config.pad_token_id
        hidden = run_frozen(umt5, lambda: umt5(input_ids=ids, attention_mask=mask).last_hidden_state)
        return hidden * mask[..., None].to(hidden.dtype), mask.to(hidden.dtype)

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                text_mask: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """The velocity for latents (B, C, F, h, w) (an image's F = 1); the text as the pipeline gives it (padded
        with zeros to 512 tokens), the timestep 1000 x sigma."""
        return unet(hidden_states=noisy, timestep=timesteps.to(noisy.dtype), encoder_hidden_states=hidden.to(
            noisy.dtype), return_dict=False)[0]

    def vae_latents(self, raw: torch.Tensor, vae: nn.Module) -> torch.Tensor:
        mean, std = latent_stats(vae, raw)
        return (raw - mean) / std

    # --- samples ---

    def scheduler_config(self) -> dict[str, Any]:
        return {"shift": 3.0}  # Wan 2.1's sampling shift at 480p (musubi-tuner's --flow_shift for it)

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        from diffusers import WanPipeline

        return WanPipeline(tokenizer=model.tokenizers[0], text_encoder=model.text_encoders[0], vae=model.vae,
                           scheduler=scheduler, transformer=model.unet)

    def pipeline_embeds(self, hidden: torch.Tensor, text_mask: torch.Tensor | None) -> dict[str, Any]:
        return {"prompt_embeds": hidden[:1], "negative_prompt_embeds": hidden[1:]}

    def pipeline_kwargs(self, cfg_scale: float) -> dict[str, Any]:
        return {"guidance_scale": cfg_scale, "num_frames": self.sample_frames}

    def decode_latents(self, vae: nn.Module, latents: torch.Tensor, width: int, height: int) -> torch.Tensor:
        """Frames (B, 3, F, H, W) in [-1, 1] of latents (B, C, F', h, w) as WanPipeline returns them."""
        latents = latents.to(vae.device, vae.dtype)
        mean, std = latent_stats(vae, latents)
        return vae.decode(latents * std + mean).sample

    # --- LoRA ---

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        return {**super().lora_metadata(v_prediction), "modelspec.implementation": self.implementation,
                "modelspec.prediction_type": None, "ss_network_module": "networks.lora_wan",
                **self.flow_metadata()}

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        return [target for i, block in enumerate(unet.blocks) for target in block_targets(i, block)]


def block_targets(index: int, block: nn.Module) -> list[LoraTarget]:
    """A block's attention and feed-forward linears under musubi-tuner's names (`lora_unet_blocks_0_self_attn_q`,
    `..._cross_attn_o`, `..._ffn_0`), as its lora_wan trains them."""
    prefix = f"lora_unet_blocks_{index}_"
    modules = dict(block.named_modules())
    out = [LoraTarget(f"{prefix}{theirs}_{proj}", (modules[f"{ours}.{path}"],), path=f"blocks.{index}.{ours}.{path}")
           for ours, theirs in ATTENTIONS.items() for path, proj in PROJECTIONS.items()]
    return out + [LoraTarget(prefix + theirs, (modules[path],), path=f"blocks.{index}.{path}")
                  for path, theirs in FFN.items()]


def latent_stats(vae: nn.Module, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The autoencoder's per-channel latent mean and std, shaped (1, C, 1, 1, 1) like `like`."""
    shape = (1, vae.config.z_dim) + (1,) * (like.ndim - 2)
    mean = torch.tensor(vae.config.latents_mean).view(shape).to(like.device, like.dtype)
    std = torch.tensor(vae.config.latents_std).view(shape).to(like.device, like.dtype)
    return mean, std


WAN21 = Wan()
