"""FLUX.1's transformer in the reference layout (Black Forest Labs' `flux` code: `double_blocks.N.img_attn.qkv`, the
layout of flux1-dev.safetensors) and in diffusers' FluxTransformer2DModel: its rules (reference_layout.py).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from trainers.models import reference_layout as layout
from trainers.models.base import ModelLoadError
from trainers.models.reference_layout import Rule, linear

MARKER = "double_blocks."  # the first key of its blocks: where the file nests the denoiser
PREFIXES = ("model.diffusion_model.", "diffusion_model.")  # how all-in-one checkpoints nest the transformer
ROPE_AXES = {128: (16, 56, 56)}  # position-embedding axes per attention-head width (FLUX.1: 128); not in the weights


def rules(double_blocks: int, single_blocks: int, guidance: bool) -> list[Rule]:
    out: list[Rule] = []
    embedders = [("time_in", "timestep_embedder"), ("vector_in", "text_embedder")]
    embedders += [("guidance_in", "guidance_embedder")] if guidance else []
    for ref, ours in embedders:
        out += linear(f"{ref}.in_layer", f"time_text_embed.{ours}.linear_1")
        out += linear(f"{ref}.out_layer", f"time_text_embed.{ours}.linear_2")
    out += linear("txt_in", "context_embedder")
    out += linear("img_in", "x_embedder")
    out += linear("final_layer.linear", "proj_out")
    out += linear("final_layer.adaLN_modulation.1", "norm_out.linear", swap_halves=True)
    streams = (  # per stream: its modulation, q/k/v, output projection, MLP and q/k norms in diffusers
        ("img", "norm1", ("to_q", "to_k", "to_v"), "to_out.0", "ff", ("norm_q", "norm_k")),
        ("txt", "norm1_context", ("add_q_proj", "add_k_proj", "add_v_proj"), "to_add_out", "ff_context",
         ("norm_added_q", "norm_added_k")))
    for i in range(double_blocks):
        ref, ours = f"double_blocks.{i}.", f"transformer_blocks.{i}."
        for stream, norm, qkv, proj, ff, qk_norms in streams:
            out += linear(f"{ref}{stream}_mod.lin", f"{ours}{norm}.linear")
            out += linear(f"{ref}{stream}_attn.qkv", *(f"{ours}attn.{p}" for p in qkv))
            out += linear(f"{ref}{stream}_attn.proj", f"{ours}attn.{proj}")
            out += linear(f"{ref}{stream}_mlp.0", f"{ours}{ff}.net.0.proj")
            out += linear(f"{ref}{stream}_mlp.2", f"{ours}{ff}.net.2")
            for long, norm_name in zip(("query", "key"), qk_norms):
                out.append(Rule(f"{ref}{stream}_attn.norm.{long}_norm.scale", (f"{ours}attn.{norm_name}.weight",)))
    for i in range(single_blocks):
        ref, ours = f"single_blocks.{i}.", f"single_transformer_blocks.{i}."
        out += linear(f"{ref}modulation.lin", f"{ours}norm.linear")
        out += linear(f"{ref}linear1", *(f"{ours}attn.{p}" for p in ("to_q", "to_k", "to_v")), f"{ours}proj_mlp")
        out += linear(f"{ref}linear2", f"{ours}proj_out")
        out.append(Rule(f"{ref}norm.query_norm.scale", (f"{ours}attn.norm_q.weight",)))
        out.append(Rule(f"{ref}norm.key_norm.scale", (f"{ours}attn.norm_k.weight",)))
    return out


def blocks_config(shapes: Mapping[str, tuple[int, ...]], name: str, title: str,
                  own: Callable[[Mapping[str, tuple[int, ...]]], dict[str, Any]]) -> dict[str, Any]:
    """The config of FLUX.1's blocks in a reference-layout `title` transformer (FLUX.1, Chroma), read from its
    tensor shapes, with what `own` reads of the rest; a missing tensor or another head width is named."""
    try:
        inner, in_channels = shapes["img_in.weight"]
        head = shapes["double_blocks.0.img_attn.norm.query_norm.scale"][0]
        config = {
            "patch_size": 1, "in_channels": in_channels, "out_channels": None,
            "num_layers": layout.count(shapes, "double_blocks."),
            "num_single_layers": layout.count(shapes, "single_blocks."),
            "attention_head_dim": head, "num_attention_heads": inner // head,
            "joint_attention_dim": shapes["txt_in.weight"][1], **own(shapes),
        }
    except KeyError as err:
        raise ModelLoadError(f"{name}: the {title} transformer has no {err.args[0]}: is the file complete?") from None
    if head not in ROPE_AXES:
        raise ModelLoadError(f"{name}: attention heads {head} wide, not {title}'s 128: not a {title} transformer")
    return {**config, "axes_dims_rope": ROPE_AXES[head]}


def config_from_shapes(shapes: Mapping[str, tuple[int, ...]], name: str) -> dict[str, Any]:
    """FluxTransformer2DModel's config of a reference-layout transformer, read from its tensor shapes."""
    return blocks_config(shapes, name, "FLUX.1", lambda found: {
        "pooled_projection_dim": found["vector_in.in_layer.weight"][1],
        "guidance_embeds": "guidance_in.in_layer.weight" in found})


def _rules_of(config: Mapping[str, Any]) -> list[Rule]:
    return rules(config["num_layers"], config["num_single_layers"], config["guidance_embeds"])


LAYOUT = layout.Layout(PREFIXES, MARKER, _rules_of)
strip_prefix, to_diffusers, to_reference = LAYOUT.strip_prefix, LAYOUT.to_diffusers, LAYOUT.to_reference
