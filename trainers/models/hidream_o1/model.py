"""HiDream-O1-Image's denoiser: Qwen3-VL (transformers' Qwen3VLTextModel and Qwen3VLVisionModel, the published
layout) with HiDream's pixel heads, in the module names of Comfy-Org's single file: `language_model.*`, `visual.*`
(its deepstack mergers, which image generation never runs, are not in the file), `x_embedder.proj1/proj2` (a 32x32 RGB
patch -> a quarter of the width -> the width), `t_embedder1.mlp.0/2` (a sinusoidal embedding of 1000 t, put in place
of the <|tms_token|>'s embedding) and `final_layer2.linear` (the width -> a 32x32 RGB patch).

One sequence per sample: the caption's tokens (the chat template, then <|boi_token|><|tms_token|>), then one token per
image patch. Text tokens attend causally; the timestep token and the image tokens attend to every real token
(musubi-tuner's and the reference's 4D mask). Positions are Qwen3-VL's 3D (interleaved MRoPE): the text's (i, i, i),
the image's (4096, 4096 + row, 4096 + column). The output at the image tokens is the clean image's patches (an
x-prediction); the family turns it into what the flow layer scores.
"""
from __future__ import annotations

import math
from functools import partial
from typing import Any

import torch
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.loaders.peft import PeftAdapterMixin
from diffusers.models.modeling_utils import ModelMixin
from torch import nn
from torch.utils.checkpoint import checkpoint

PATCH = 32  # pixels a side of one image token
CHANNELS = 3
IMAGE_POSITION = 4096  # where the image's positions start (the reference's fix_point)
TMS_TOKEN_ID = 151673  # <|tms_token|> of the published tokenizer
FREQUENCIES = 256  # the timestep embedding's sinusoid width


class PatchEmbed(nn.Module):
    """A flat 32x32 RGB patch (3072 values) to the decoder's width through a quarter-width bottleneck."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj1 = nn.Linear(PATCH * PATCH * CHANNELS, width // 4, bias=False)
        self.proj2 = nn.Linear(width // 4, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj2(self.proj1(x))


class FinalLayer(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, PATCH * PATCH * CHANNELS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


class TimestepEmbed(nn.Module):
    """The MLP of a sinusoidal embedding (cosines, then sines) of 1000 t."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(FREQUENCIES, width), nn.SiLU(), nn.Linear(width, width))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = FREQUENCIES // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
        args = (t.float() * 1000)[:, None] * freqs[None]
        return self.mlp(torch.cat([torch.cos(args), torch.sin(args)], dim=-1).to(self.mlp[0].weight.dtype))


class HiDreamO1Transformer(ModelMixin, ConfigMixin, PeftAdapterMixin):
    """Qwen3-VL's decoder and vision tower with HiDream-O1's patch, timestep and output heads; `text_config` and
    `vision_config` as Qwen3VLConfig's (the published defaults: Qwen3-VL 8B)."""

    _supports_gradient_checkpointing = True
    _no_split_modules = ["Qwen3VLTextDecoderLayer"]

    @register_to_config
    def __init__(self, text_config: dict[str, Any] | None = None, vision_config: dict[str, Any] | None = None,
                 tms_token_id: int = TMS_TOKEN_ID) -> None:
        super().__init__()
        from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLConfig
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextModel, Qwen3VLVisionModel

        full = Qwen3VLConfig(text_config=text_config, vision_config={**(vision_config or {}),
                                                                        "deepstack_visual_indexes": []})
        full.text_config._attn_implementation = full.vision_config._attn_implementation = "sdpa"
        self.language_model = Qwen3VLTextModel(full.text_config)
        self.visual = Qwen3VLVisionModel(full.vision_config)
        width = full.text_config.hidden_size
        self.t_embedder1 = TimestepEmbed(width)
        self.x_embedder = PatchEmbed(width)
        self.final_layer2 = FinalLayer(width)
        self.gradient_checkpointing = False

    def _set_gradient_checkpointing(self, enable: bool = True, gradient_checkpointing_func: Any = None) -> None:
        """Checkpoint each decoder layer from this forward only: transformers' layers would checkpoint themselves
        too (GradientCheckpointingLayer), recomputing twice."""
        self._gradient_checkpointing_func = gradient_checkpointing_func or partial(checkpoint, use_reentrant=False)
        self.gradient_checkpointing = enable

    def forward(self, input_ids: torch.Tensor, text_mask: torch.Tensor, patches: torch.Tensor,
                grid: tuple[int, int], t: torch.Tensor) -> torch.Tensor:
        """Clean-image patches (B, h * w, 3072) predicted from the noisy `patches` (B, h * w, 3072) of an h x w
        patch grid at time `t` (B,) (1: clean), for captions `input_ids` (B, L) with `text_mask` (B, L) (1: a real
        token; the padding of a batch's shorter captions is 0, masked out)."""
        embeds = self.language_model.embed_tokens(input_ids)
        time = self.t_embedder1(t).to(embeds.dtype)
        embeds = torch.where((input_ids == self.config.tms_token_id)[..., None], time[:, None], embeds)
        image = self.x_embedder(patches.to(embeds.dtype))
        hidden = torch.cat([embeds, image], dim=1)
        positions = sequence_positions(text_mask, grid)
        cos_sin = self.language_model.rotary_emb(hidden, positions)
        mask = attention_mask(input_ids, text_mask, image.shape[1], self.config.tms_token_id)
        for layer in self.language_model.layers:
            if self.gradient_checkpointing and torch.is_grad_enabled():
                hidden = self._gradient_checkpointing_func(layer, hidden, cos_sin, mask)
            else:
                hidden = layer(hidden, cos_sin, mask)
        hidden = self.language_model.norm(hidden[:, input_ids.shape[1]:])
        return self.final_layer2(hidden)


def sequence_positions(text_mask: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """Qwen3-VL's (3, B, L + h * w) positions: each real text token (i, i, i) counted from 0 (the padding after a
    shorter caption keeps its neighbour's, masked out anyway), the image's (4096, 4096 + row, 4096 + column)."""
    b = text_mask.shape[0]
    text = (text_mask.long().cumsum(-1) - 1).clamp_min(0)
    h, w = grid
    rows = torch.arange(h, device=text.device).repeat_interleave(w)
    cols = torch.arange(w, device=text.device).repeat(h)
    image = torch.stack([torch.zeros_like(rows), rows, cols]) + IMAGE_POSITION
    return torch.cat([text[None].expand(3, b, -1), image[:, None].expand(3, b, -1)], dim=-1)


def attention_mask(input_ids: torch.Tensor, text_mask: torch.Tensor, image_tokens: int, tms_token_id: int
                   ) -> torch.Tensor:
    """The (B, 1, L, L) mask of SDPA (True: attended): text rows causal, the timestep token's and the image's rows see
    every real token; no row sees the padding (a boolean mask: no dtype for autocast to cast)."""
    b, length = input_ids.shape
    total = length + image_tokens
    device = input_ids.device
    allowed = torch.ones(total, total, dtype=torch.bool, device=device).tril()[None].repeat(b, 1, 1)
    full = torch.cat([input_ids == tms_token_id, torch.ones(b, image_tokens, dtype=torch.bool, device=device)], 1)
    allowed |= full[:, :, None]
    real = torch.cat([text_mask.bool(), torch.ones(b, image_tokens, dtype=torch.bool, device=device)], 1)
    allowed &= real[:, None, :]
    return allowed[:, None]


def patchify(pixels: torch.Tensor) -> torch.Tensor:
    """(B, 3, H, W) -> (B, H/32 * W/32, 3072): each patch's channels, then rows, then columns (the reference's
    'B C (H p1) (W p2) -> B (H W) (C p1 p2)')."""
    b, c, height, width = pixels.shape
    x = pixels.reshape(b, c, height // PATCH, PATCH, width // PATCH, PATCH)
    return x.permute(0, 2, 4, 1, 3, 5).reshape(b, (height // PATCH) * (width // PATCH), c * PATCH * PATCH)


def unpatchify(patches: torch.Tensor, height: int, width: int) -> torch.Tensor:
    b = patches.shape[0]
    x = patches.reshape(b, height // PATCH, width // PATCH, CHANNELS, PATCH, PATCH)
    return x.permute(0, 3, 1, 4, 2, 5).reshape(b, CHANNELS, height, width)
