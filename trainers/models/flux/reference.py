"""FLUX.1's transformer in the reference layout (Black Forest Labs' `flux` code: `double_blocks.N.img_attn.qkv`, the
layout of flux1-dev.safetensors, which sd-scripts, ComfyUI and Forge read) and in diffusers' FluxTransformer2DModel.

One table of rules maps each reference tensor to the diffusers tensors it holds, in both directions: fused layers
(q, k, v and the single blocks' MLP input) are the diffusers layers stacked by rows, and the final modulation has
its (shift, scale) halves in the other order.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from trainers.models.base import ModelLoadError

PREFIXES = ("model.diffusion_model.", "diffusion_model.")  # how all-in-one checkpoints nest the transformer
ROPE_AXES = {128: (16, 56, 56)}  # position-embedding axes per attention-head width (FLUX.1: 128); not in the weights


@dataclass(frozen=True)
class Rule:
    reference: str  # a reference tensor name
    parts: tuple[str, ...]  # the diffusers tensors it holds, stacked by rows in this order
    swap_halves: bool = False  # (shift, scale) in the reference, (scale, shift) in diffusers


def _linear(reference: str, *parts: str, swap_halves: bool = False) -> Iterator[Rule]:
    for param in ("weight", "bias"):
        yield Rule(f"{reference}.{param}", tuple(f"{p}.{param}" for p in parts), swap_halves)


def rules(double_blocks: int, single_blocks: int, guidance: bool) -> list[Rule]:
    out: list[Rule] = []
    embedders = [("time_in", "timestep_embedder"), ("vector_in", "text_embedder")]
    embedders += [("guidance_in", "guidance_embedder")] if guidance else []
    for ref, ours in embedders:
        out += _linear(f"{ref}.in_layer", f"time_text_embed.{ours}.linear_1")
        out += _linear(f"{ref}.out_layer", f"time_text_embed.{ours}.linear_2")
    out += _linear("txt_in", "context_embedder")
    out += _linear("img_in", "x_embedder")
    out += _linear("final_layer.linear", "proj_out")
    out += _linear("final_layer.adaLN_modulation.1", "norm_out.linear", swap_halves=True)
    streams = (  # per stream: its modulation, q/k/v, output projection, MLP and q/k norms in diffusers
        ("img", "norm1", ("to_q", "to_k", "to_v"), "to_out.0", "ff", ("norm_q", "norm_k")),
        ("txt", "norm1_context", ("add_q_proj", "add_k_proj", "add_v_proj"), "to_add_out", "ff_context",
         ("norm_added_q", "norm_added_k")))
    for i in range(double_blocks):
        ref, ours = f"double_blocks.{i}.", f"transformer_blocks.{i}."
        for stream, norm, qkv, proj, ff, qk_norms in streams:
            out += _linear(f"{ref}{stream}_mod.lin", f"{ours}{norm}.linear")
            out += _linear(f"{ref}{stream}_attn.qkv", *(f"{ours}attn.{p}" for p in qkv))
            out += _linear(f"{ref}{stream}_attn.proj", f"{ours}attn.{proj}")
            out += _linear(f"{ref}{stream}_mlp.0", f"{ours}{ff}.net.0.proj")
            out += _linear(f"{ref}{stream}_mlp.2", f"{ours}{ff}.net.2")
            for long, norm_name in zip(("query", "key"), qk_norms):
                out.append(Rule(f"{ref}{stream}_attn.norm.{long}_norm.scale", (f"{ours}attn.{norm_name}.weight",)))
    for i in range(single_blocks):
        ref, ours = f"single_blocks.{i}.", f"single_transformer_blocks.{i}."
        out += _linear(f"{ref}modulation.lin", f"{ours}norm.linear")
        out += _linear(f"{ref}linear1", *(f"{ours}attn.{p}" for p in ("to_q", "to_k", "to_v")), f"{ours}proj_mlp")
        out += _linear(f"{ref}linear2", f"{ours}proj_out")
        out.append(Rule(f"{ref}norm.query_norm.scale", (f"{ours}attn.norm_q.weight",)))
        out.append(Rule(f"{ref}norm.key_norm.scale", (f"{ours}attn.norm_k.weight",)))
    return out


def _count(keys: Any, pattern: str) -> int:
    found = {int(m[1]) for k in keys if (m := re.match(pattern, k))}
    return max(found) + 1 if found else 0


def strip_prefix(state: Mapping[str, Any]) -> dict[str, Any]:
    """The transformer's own tensors of a file (the nesting of all-in-one checkpoints removed)."""
    for prefix in PREFIXES:
        if any(k.startswith(prefix + "double_blocks.") for k in state):
            return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    return dict(state)


def config_from_shapes(shapes: Mapping[str, tuple[int, ...]], name: str) -> dict[str, Any]:
    """FluxTransformer2DModel's config of a reference-layout transformer, read from its tensor shapes."""
    try:
        inner, in_channels = shapes["img_in.weight"]
        head = shapes["double_blocks.0.img_attn.norm.query_norm.scale"][0]
        config = {
            "patch_size": 1, "in_channels": in_channels, "out_channels": None,
            "num_layers": _count(shapes, r"double_blocks\.(\d+)\."),
            "num_single_layers": _count(shapes, r"single_blocks\.(\d+)\."),
            "attention_head_dim": head, "num_attention_heads": inner // head,
            "joint_attention_dim": shapes["txt_in.weight"][1],
            "pooled_projection_dim": shapes["vector_in.in_layer.weight"][1],
            "guidance_embeds": "guidance_in.in_layer.weight" in shapes,
        }
    except KeyError as err:
        raise ModelLoadError(f"{name}: the FLUX.1 transformer has no {err.args[0]}: is the file complete?") from None
    if head not in ROPE_AXES:
        raise ModelLoadError(f"{name}: attention heads {head} wide, not FLUX.1's 128: not a FLUX.1 transformer")
    return {**config, "axes_dims_rope": ROPE_AXES[head]}


def to_diffusers(state: Mapping[str, torch.Tensor], config: Mapping[str, Any], name: str) -> dict[str, torch.Tensor]:
    """Reference-layout tensors -> FluxTransformer2DModel's state dict."""
    inner = config["attention_head_dim"] * config["num_attention_heads"]
    out: dict[str, torch.Tensor] = {}
    for rule in rules(config["num_layers"], config["num_single_layers"], config["guidance_embeds"]):
        if rule.reference not in state:
            raise ModelLoadError(f"{name}: the FLUX.1 transformer has no {rule.reference}: is the file complete?")
        tensor = state[rule.reference]
        if rule.swap_halves:
            tensor = torch.cat(tensor.chunk(2, dim=0)[::-1])
        sizes = [inner] * (len(rule.parts) - 1)
        pieces = tensor.split(sizes + [tensor.shape[0] - sum(sizes)]) if len(rule.parts) > 1 else (tensor,)
        out.update(zip(rule.parts, pieces))
    return out


def to_reference(state: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """FluxTransformer2DModel's state dict -> reference-layout tensors (what flux1-dev.safetensors holds)."""
    out: dict[str, torch.Tensor] = {}
    for rule in rules(config["num_layers"], config["num_single_layers"], config["guidance_embeds"]):
        tensor = torch.cat([state[p] for p in rule.parts]) if len(rule.parts) > 1 else state[rule.parts[0]]
        out[rule.reference] = torch.cat(tensor.chunk(2, dim=0)[::-1]) if rule.swap_halves else tensor
    return out
