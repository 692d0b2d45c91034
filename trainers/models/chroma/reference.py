"""Chroma's transformer in the reference layout (lodestones' `chroma-unlocked-*.safetensors`, as sd-scripts'
model_type chroma and ComfyUI read it): FLUX.1's blocks without their modulations, no time/vector/guidance
embedders and no final modulation, and the distilled guidance layer that computes every modulation instead.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from trainers.models import reference_layout as layout
from trainers.models.base import ModelLoadError
from trainers.models.flux import reference as flux
from trainers.models.reference_layout import Rule, linear

MARKER = flux.MARKER
PREFIXES = flux.PREFIXES
strip_prefix = flux.strip_prefix  # the same nesting as FLUX.1's files
# what FLUX.1's layout has and Chroma's has not (its modulations come from the distilled guidance layer)
_NOT_IN_CHROMA = ("time_in.", "vector_in.", "guidance_in.", "final_layer.adaLN_modulation.")
_MODULATIONS = ("_mod.lin.", "modulation.lin.")


def rules(double_blocks: int, single_blocks: int, guidance_layers: int) -> list[Rule]:
    out = [rule for rule in flux.rules(double_blocks, single_blocks, guidance=False)
           if not rule.reference.startswith(_NOT_IN_CHROMA) and not any(m in rule.reference for m in _MODULATIONS)]
    guide = "distilled_guidance_layer."
    out += [*linear(f"{guide}in_proj", f"{guide}in_proj"), *linear(f"{guide}out_proj", f"{guide}out_proj")]
    for i in range(guidance_layers):
        out += linear(f"{guide}layers.{i}.in_layer", f"{guide}layers.{i}.linear_1")
        out += linear(f"{guide}layers.{i}.out_layer", f"{guide}layers.{i}.linear_2")
        out.append(Rule(f"{guide}norms.{i}.scale", (f"{guide}norms.{i}.weight",)))
    return out


def config_from_shapes(shapes: Mapping[str, tuple[int, ...]], name: str) -> dict[str, Any]:
    """ChromaTransformer2DModel's config of a reference-layout transformer, read from its tensor shapes."""
    try:
        inner, in_channels = shapes["img_in.weight"]
        head = shapes["double_blocks.0.img_attn.norm.query_norm.scale"][0]
        hidden, channels = shapes["distilled_guidance_layer.in_proj.weight"]
        config = {
            "patch_size": 1, "in_channels": in_channels, "out_channels": None,
            "num_layers": layout.count(shapes, "double_blocks."),
            "num_single_layers": layout.count(shapes, "single_blocks."),
            "attention_head_dim": head, "num_attention_heads": inner // head,
            "joint_attention_dim": shapes["txt_in.weight"][1],
            "approximator_num_channels": channels, "approximator_hidden_dim": hidden,
            "approximator_layers": layout.count(shapes, "distilled_guidance_layer.layers."),
        }
    except KeyError as err:
        raise ModelLoadError(f"{name}: the Chroma transformer has no {err.args[0]}: is the file complete?") from None
    if head not in flux.ROPE_AXES:
        raise ModelLoadError(f"{name}: attention heads {head} wide, not Chroma's 128: not a Chroma transformer")
    return {**config, "axes_dims_rope": flux.ROPE_AXES[head]}


def to_diffusers(state: Mapping[str, torch.Tensor], config: Mapping[str, Any], name: str) -> dict[str, torch.Tensor]:
    """Reference-layout tensors -> ChromaTransformer2DModel's state dict."""
    width = config["attention_head_dim"] * config["num_attention_heads"]
    return layout.to_diffusers(state, _rules_of(config), width, name)


def to_reference(state: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """ChromaTransformer2DModel's state dict -> reference-layout tensors (what chroma-unlocked-*.safetensors holds)."""
    return layout.to_reference(state, _rules_of(config))


def _rules_of(config: Mapping[str, Any]) -> list[Rule]:
    return rules(config["num_layers"], config["num_single_layers"], config["approximator_layers"])
