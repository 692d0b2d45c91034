"""SD3/SD3.5's MMDiT in the reference layout (Stability's `sd3.5` code: `joint_blocks.N.x_block.attn.qkv`, the layout
of sd3.5_large.safetensors) and in diffusers' SD3Transformer2DModel: its rules (reference_layout.py).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from trainers.models import reference_layout as layout
from trainers.models.base import ModelLoadError
from trainers.models.reference_layout import Rule, linear

MARKER = "joint_blocks."  # the first key of its blocks: where the file nests the denoiser
PREFIXES = ("model.diffusion_model.",)  # how Stability's files nest the MMDiT
HEAD_WIDTH = 64  # SD3's attention heads without q/k norms (SD3 Medium); the width is not in its weights
SAMPLE_SIZE = 128  # every published SD3/SD3.5 transformer config's sample_size (a pipeline default only)


def rules(blocks: int, dual_attention: tuple[int, ...], qk_norm: bool) -> list[Rule]:
    out: list[Rule] = [Rule("pos_embed", ("pos_embed.pos_embed",))]
    out += linear("x_embedder.proj", "pos_embed.proj")
    for ref, ours in (("t_embedder", "timestep_embedder"), ("y_embedder", "text_embedder")):
        out += linear(f"{ref}.mlp.0", f"time_text_embed.{ours}.linear_1")
        out += linear(f"{ref}.mlp.2", f"time_text_embed.{ours}.linear_2")
    out += linear("context_embedder", "context_embedder")
    for i in range(blocks):
        ref, ours, last = f"joint_blocks.{i}.", f"transformer_blocks.{i}.", i == blocks - 1
        x, ctx = ref + "x_block.", ref + "context_block."
        out += linear(x + "adaLN_modulation.1", ours + "norm1.linear")
        # the last block's context modulation is (shift, scale) only, ordered as diffusers' final norm is not
        out += linear(ctx + "adaLN_modulation.1", ours + "norm1_context.linear", swap_halves=last)
        out += linear(x + "attn.qkv", *(f"{ours}attn.to_{p}" for p in "qkv"))
        out += linear(ctx + "attn.qkv", *(f"{ours}attn.add_{p}_proj" for p in "qkv"))
        out += linear(x + "attn.proj", ours + "attn.to_out.0")
        out += linear(x + "mlp.fc1", ours + "ff.net.0.proj")
        out += linear(x + "mlp.fc2", ours + "ff.net.2")
        if not last:  # the last block's context stream ends after its attention's input
            out += linear(ctx + "attn.proj", ours + "attn.to_add_out")
            out += linear(ctx + "mlp.fc1", ours + "ff_context.net.0.proj")
            out += linear(ctx + "mlp.fc2", ours + "ff_context.net.2")
        norms = [(x + "attn.", ours + "attn.norm_"), (ctx + "attn.", ours + "attn.norm_added_")]
        if i in dual_attention:
            out += linear(x + "attn2.qkv", *(f"{ours}attn2.to_{p}" for p in "qkv"))
            out += linear(x + "attn2.proj", ours + "attn2.to_out.0")
            norms.append((x + "attn2.", ours + "attn2.norm_"))
        if qk_norm:
            out += [Rule(f"{src}ln_{p}.weight", (f"{dst}{p}.weight",)) for src, dst in norms for p in "qk"]
    out += linear("final_layer.linear", "proj_out")
    out += linear("final_layer.adaLN_modulation.1", "norm_out.linear", swap_halves=True)
    return out


def config_from_shapes(shapes: Mapping[str, tuple[int, ...]], name: str) -> dict[str, Any]:
    """SD3Transformer2DModel's config of a reference-layout MMDiT, read from its tensor shapes."""
    try:
        inner, in_channels, patch, _ = shapes["x_embedder.proj.weight"]
        qk_norm = "joint_blocks.0.x_block.attn.ln_q.weight" in shapes
        head = shapes["joint_blocks.0.x_block.attn.ln_q.weight"][0] if qk_norm else HEAD_WIDTH
        return {
            "sample_size": SAMPLE_SIZE, "patch_size": patch, "in_channels": in_channels,
            "num_layers": layout.count(shapes, "joint_blocks."), "attention_head_dim": head,
            "num_attention_heads": inner // head, "joint_attention_dim": shapes["context_embedder.weight"][1],
            "caption_projection_dim": shapes["context_embedder.weight"][0],
            "pooled_projection_dim": shapes["y_embedder.mlp.0.weight"][1],
            "out_channels": shapes["final_layer.linear.weight"][0] // (patch * patch),
            "pos_embed_max_size": math.isqrt(shapes["pos_embed"][1]),
            "dual_attention_layers": tuple(sorted({int(k.split(".")[1]) for k in shapes if ".x_block.attn2." in k})),
            "qk_norm": "rms_norm" if qk_norm else None,
        }
    except KeyError as err:
        raise ModelLoadError(f"{name}: the SD3 MMDiT has no {err.args[0]}: is the file complete?") from None


def _rules_of(config: Mapping[str, Any]) -> list[Rule]:
    return rules(config["num_layers"], tuple(config["dual_attention_layers"]), bool(config["qk_norm"]))


LAYOUT = layout.Layout(PREFIXES, MARKER, _rules_of)
strip_prefix, to_diffusers, to_reference = LAYOUT.strip_prefix, LAYOUT.to_diffusers, LAYOUT.to_reference
