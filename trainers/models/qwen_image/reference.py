"""Qwen-Image's transformer as ComfyUI's diffusion_models file and musubi-tuner's --dit hold it: diffusers' own module
names (QwenImageTransformer2DModel), perhaps nested under ComfyUI's prefix. The config comes from the tensor shapes,
the rope axes from the published one (transformer.json), scaled to the head width as published."""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from trainers.models import reference_layout as layout

MARKER = "txt_norm."  # only Qwen-Image's transformer has it: where the file nests the denoiser
PREFIXES = ("model.diffusion_model.", "diffusion_model.")  # ComfyUI's nesting of the transformer
BASE_CONFIG = Path(__file__).with_name("transformer.json")
PATCH = 2  # the published patch size (2x2 latents a token)


def config_from_shapes(shapes: Mapping[str, tuple[int, ...]], name: str) -> dict[str, Any]:
    """QwenImageTransformer2DModel's config of a single file: its sizes from the tensor shapes, the rest as published."""
    (width, inputs), (head,), (outputs, _), (_, text_width) = layout.shapes_of(
        shapes, ("img_in.weight", "transformer_blocks.0.attn.norm_q.weight", "proj_out.weight", "txt_in.weight"), name,
        "Qwen-Image")
    base = {k: v for k, v in json.loads(BASE_CONFIG.read_text(encoding="utf-8")).items() if not k.startswith("_")}
    base_head = base["attention_head_dim"]
    return {**base, "in_channels": inputs, "out_channels": outputs // PATCH**2,
            "num_layers": layout.count(shapes, "transformer_blocks."), "attention_head_dim": head,
            "num_attention_heads": width // head, "joint_attention_dim": text_width,
            "axes_dims_rope": [axis * head // base_head for axis in base["axes_dims_rope"]]}


def to_diffusers(state: Mapping[str, torch.Tensor], config: Mapping[str, Any], name: str) -> dict[str, torch.Tensor]:
    """The file's transformer tensors are diffusers' already (a whole-model file's other parts are left out)."""
    return dict(state)


LAYOUT = layout.Layout(PREFIXES, MARKER, lambda config: [])  # diffusers' own names: no rules
strip_prefix = LAYOUT.strip_prefix
