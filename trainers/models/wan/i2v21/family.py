"""Wan 2.1 image-to-video 14B (diffusers WanImageToVideoPipeline with one transformer and a CLIP image encoder), as
musubi-tuner trains task i2v-14B: each training clip's first frame conditions it twice, as the pipeline does: its
mask and image latent concatenated to the noisy latents (Wan 2.2 I2V's condition, trainers/models/wan/wan22/i2v.py),
and its CLIP features (the image encoder's second-to-last hidden states of the frame through the pipeline's
CLIPImageProcessor) in the transformer's image cross-attention. Both are encoded at every step (the encoder frozen),
or with cached latents cached beside each window's (musubi-tuner's wan_cache_latents.py caches its clip context);
everything else is Wan 2.1's. Samples render through WanImageToVideoPipeline from each prompt's --ci first frame."""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from trainers.data.video_cache import WindowExtras
from trainers.data.video_dataset import EXTRA
from trainers.models.base import LoadedModel, LoraTarget, SizeConditioning
from trainers.models.wan.family import Wan
from trainers.models.wan.i2v21.rules import WanI2VRules
from trainers.models.wan.wan22.i2v import batch_condition, window_extras

CLIP_FEATURES = "clip_features"  # the latent cache's name of a window's CLIP features (the batch's cached_...)

IMAGE_PROJECTIONS = {"add_k_proj": "k_img", "add_v_proj": "v_img"}  # diffusers' -> Wan-AI's (ComfyUI's) names


@dataclass
class ImageSlot:
    """The batch's first-frame condition (B, 4 + C, F', h, w) and CLIP features (None outside steps)."""

    condition: torch.Tensor | None = None
    image_embeds: torch.Tensor | None = None


class WanI2V(WanI2VRules, Wan):
    implementation = "https://github.com/Wan-Video/Wan2.1"
    image_encoder: Any = None  # the loaded model's (load), frozen
    image_processor: Any = None
    slot = ImageSlot()

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        import transformers

        from trainers.models.components import load_component

        model = super().load(folder, weight_dtype, vae_path, random_init)
        family = copy.copy(model.family)
        family.image_encoder = load_component(transformers.CLIPVisionModel, folder, "image_encoder", weight_dtype,
                                              random_init).eval().requires_grad_(False)
        family.image_processor = transformers.CLIPImageProcessor.from_pretrained(folder, subfolder="image_processor")
        return dataclasses.replace(model, family=family)

    def save_components(self, folder: Path) -> dict[str, list[str]]:
        """The CLIP image encoder and its processor, as WanImageToVideoPipeline's folders hold them."""
        if self.image_encoder is None:
            return {}
        self.image_encoder.save_pretrained(folder / "image_encoder")
        self.image_processor.save_pretrained(folder / "image_processor")
        return {"image_encoder": ["transformers", type(self.image_encoder).__name__],
                "image_processor": ["transformers", type(self.image_processor).__name__]}

    def configured(self, values: Mapping[str, Any]) -> Any:
        clone = super().configured(values)
        clone.slot = ImageSlot()  # the run's own
        return clone

    def clip_features(self, frames: torch.Tensor, device: torch.device) -> torch.Tensor:
        """The CLIP features of first frames (B, 3, H, W) in [-1, 1], as the pipeline's encode_image reads an image
        (CLIPImageProcessor of the frame as an 8-bit picture, hidden_states[-2])."""
        from PIL import Image

        encoder = self.image_encoder.to(device)
        pictures = [Image.fromarray(np.asarray(((f.float().clamp(-1, 1) + 1) * 127.5).round().byte().permute(
            1, 2, 0).cpu())) for f in frames]
        inputs = self.image_processor(images=pictures, return_tensors="pt").to(device)
        with torch.no_grad():
            return encoder(pixel_values=inputs["pixel_values"].to(encoder.dtype),
                           output_hidden_states=True).hidden_states[-2]

    def window_extras(self, model: LoadedModel) -> WindowExtras:
        """Each window's first-frame latent and CLIP features, cached beside its latents: the key names the image
        encoder's weights and its processor's settings."""
        from trainers.data.cache import vae_fingerprint

        key = f"{vae_fingerprint(self.image_encoder)}|{self.image_processor.to_json_string()}"
        return window_extras(model.vae, key, **{CLIP_FEATURES: lambda pixels: self.clip_features(
            first_frames(pixels), model.vae.device)})

    def adapt_trainable(self, cfg: Any, session: Any, trainable: Any) -> Any:
        slot, family = self.slot, self

        def objective(predictor: nn.Module, model: Any, batch: dict[str, Any], opts: Any,
                      weight_dtype: torch.dtype) -> torch.Tensor:
            slot.condition = batch_condition(model.vae, batch, weight_dtype, "Wan 2.1")
            cached = batch.get(EXTRA + CLIP_FEATURES)
            embeds = cached if cached is not None else family.clip_features(first_frames(batch["pixels"]),
                                                                          model.vae.device)
            slot.image_embeds = embeds.to(weight_dtype)
            try:
                return inner(predictor, model, batch, opts, weight_dtype)
            finally:
                slot.condition = slot.image_embeds = None

        inner = trainable.objective
        return dataclasses.replace(trainable, objective=objective)

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                text_mask: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """The noisy latents with the first frame's mask and latent after them, its CLIP features beside the text."""
        if self.slot.condition is None or self.slot.image_embeds is None:
            raise ValueError("Wan 2.1 image-to-video needs each clip's first frame (adapt_trainable's condition)")
        model_input = torch.cat([noisy, self.slot.condition.to(noisy.device, noisy.dtype)], dim=1)
        return unet(hidden_states=model_input, timestep=timesteps.to(noisy.dtype),
                    encoder_hidden_states=hidden.to(noisy.dtype),
                    encoder_hidden_states_image=self.slot.image_embeds.to(noisy.device, noisy.dtype),
                    return_dict=False)[0]

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        """Wan 2.1's, and each block's image key and value projections (Wan-AI's cross_attn.k_img / v_img, which
        musubi-tuner's lora_wan trains in the I2V model)."""
        extra = [LoraTarget(f"lora_unet_blocks_{i}_cross_attn_{theirs}", (getattr(block.attn2, ours),),
                            path=f"blocks.{i}.attn2.{ours}")
                 for i, block in enumerate(unet.blocks) for ours, theirs in IMAGE_PROJECTIONS.items()]
        return super().lora_targets(unet) + extra

    # --- samples ---

    def scheduler_config(self) -> dict[str, Any]:
        return {"shift": 5.0}  # Wan 2.1 I2V's sampling shift at 480p (Wan-AI's sample_shift for i2v)

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        from diffusers import WanImageToVideoPipeline

        return WanImageToVideoPipeline(tokenizer=model.tokenizers[0], text_encoder=model.text_encoders[0],
                                       vae=model.vae, scheduler=scheduler, image_processor=self.image_processor,
                                       image_encoder=self.image_encoder, transformer=model.unet)

    def edit_inputs(self, images: Sequence[str], width: int, height: int) -> dict[str, Any]:
        """The sample's first frame (a sample prompt's --ci, Generate's input image) at its size."""
        if not images:
            raise ValueError("Wan 2.1 image-to-video renders from a first frame: give the sample prompt `--ci path`")
        from trainers.models.edit import sample_images

        return {"image": sample_images(images[:1], width, height)[0]}


def first_frames(pixels: torch.Tensor) -> torch.Tensor:
    """The first frames (B, 3, H, W) of clips (B, F, 3, H, W) or images (B, 3, H, W)."""
    return pixels if pixels.ndim == 4 else pixels[:, 0]


WAN21_I2V = WanI2V()
