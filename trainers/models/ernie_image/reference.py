"""ERNIE-Image's transformer in its single files (ComfyUI's diffusion_models file, which comfy/ldm/ernie reads): the
names are diffusers' own (diffusers' convert_ernie_image_transformer_checkpoint_to_diffusers only drops
`model.diffusion_model.`), so the layout is the identity. The config comes from the tensor shapes, and what they do
not hold (rope, norms) from the published one (arch/transformer.json), the rope axes scaled to the head width."""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from trainers.models.base import ModelLoadError
from trainers.models.reference_layout import count, shapes_of
from trainers.models.reference_layout import strip_prefix as strip

MARKER = "x_embedder.proj."  # the patch embedding: where a file nests the denoiser
PREFIXES = ("model.diffusion_model.", "diffusion_model.")  # ComfyUI's nesting of the transformer
BASE_CONFIG = Path(__file__).with_name("arch") / "transformer.json"  # baidu/ERNIE-Image's transformer config
TITLE = "ERNIE-Image"


def strip_prefix(state: Mapping[str, Any]) -> dict[str, Any]:
    return strip(state, PREFIXES, MARKER)


def config_from_shapes(shapes: Mapping[str, tuple[int, ...]], name: str) -> dict[str, Any]:
    """ErnieImageTransformer2DModel's config of a file's transformer: widths, depth and heads from the shapes (a
    head's width is its query norm's), the rest as published; the three rope axes keep the published proportions
    (32, 48, 48 of 128)."""
    embed, norm, gate, final = shapes_of(shapes, ("x_embedder.proj.weight", "layers.0.self_attention.norm_q.weight",
                                                  "layers.0.mlp.gate_proj.weight", "final_linear.weight"), name, TITLE)
    config = json.loads(BASE_CONFIG.read_text(encoding="utf-8"))
    hidden, head, patch = embed[0], norm[0], embed[-1]
    axes = config["rope_axes_dim"]
    if head * axes[0] % sum(axes) or hidden % head:
        raise ModelLoadError(f"{name}: the {TITLE} transformer's heads are {head} wide, which its rope axes "
                             f"({'/'.join(map(str, axes))} of {sum(axes)}) do not divide")
    text = shapes.get("text_proj.weight")
    config.update(hidden_size=hidden, num_attention_heads=hidden // head, num_layers=count(shapes, "layers."),
                  ffn_hidden_size=gate[0], in_channels=embed[1], patch_size=patch,
                  out_channels=final[0] // (patch * patch), text_in_dim=text[1] if text else hidden,
                  rope_axes_dim=[head * a // sum(axes) for a in axes])
    return {k: v for k, v in config.items() if not k.startswith("_")}


def to_diffusers(state: Mapping[str, torch.Tensor], config: Mapping[str, Any], name: str) -> dict[str, torch.Tensor]:
    return dict(state)


def to_reference(state: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    return dict(state)
