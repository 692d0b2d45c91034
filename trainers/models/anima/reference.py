"""Anima's DiT as the published single file holds it (circlestone-labs/Anima's split_files/diffusion_models, the
layout sd-scripts and ComfyUI read: NVIDIA's MiniTrainDIT names under `net.`, the LLM adapter as `net.llm_adapter.*`)
and in AnimaTransformer's (diffusers' CosmosTransformer3DModel names, diffusers' own conversion of Cosmos-Predict2
files, and AnimaTextConditioner's, which are the file's). The config comes from the tensor shapes; the rope's
extrapolation and the largest grid (what the shapes do not hold) are the published model's."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from trainers.models import reference_layout as layout
from trainers.models.reference_layout import Rule, count

MARKER = "t_embedding_norm."  # only Cosmos-Predict2's DiT has it: where the file nests the denoiser
PREFIXES = ("net.", "model.diffusion_model.", "diffusion_model.")  # the published nesting, then ComfyUI's
ADAPTER = "llm_adapter."
PATCH = (1, 2, 2)  # the published patches (frames, rows, columns)
ROPE_SCALE = (1.0, 4.0, 4.0)  # sd-scripts' rope_{t,h,w}_extrapolation_ratio for Anima
MAX_SIZE = (128, 512, 512)  # sd-scripts' max_frames, max_img_h, max_img_w (latent units)
# the reference's rope buffers, which its file may hold and diffusers computes (written back on the way out)
BUFFERS = ("pos_embedder.seq", "pos_embedder.dim_spatial_range", "pos_embedder.dim_temporal_range")
# (reference module, ours) of one DiT block
_BLOCK = (*((f"{ref}.{proj}", f"{ours}.{mine}") for ref, ours in (("self_attn", "attn1"), ("cross_attn", "attn2"))
            for proj, mine in (("q_proj", "to_q"), ("k_proj", "to_k"), ("v_proj", "to_v"),
                               ("output_proj", "to_out.0"), ("q_norm", "norm_q"), ("k_norm", "norm_k"))),
          ("mlp.layer1", "ff.net.0.proj"), ("mlp.layer2", "ff.net.2"),
          *((f"adaln_modulation_{ref}.{i}", f"{ours}.linear_{i}") for ref, ours in
            (("self_attn", "norm1"), ("cross_attn", "norm2"), ("mlp", "norm3")) for i in (1, 2)))
_TOP = (("x_embedder.proj.1", "patch_embed.proj"), ("t_embedder.1.linear_1", "time_embed.t_embedder.linear_1"),
        ("t_embedder.1.linear_2", "time_embed.t_embedder.linear_2"), ("t_embedding_norm", "time_embed.norm"),
        ("final_layer.adaln_modulation.1", "norm_out.linear_1"), ("final_layer.adaln_modulation.2", "norm_out.linear_2"),
        ("final_layer.linear", "proj_out"))


def adapter_names(config: Mapping[str, Any]) -> list[str]:
    """The LLM adapter's tensors (its names in the file and ours, under llm_adapter.)."""
    names = ["embed.weight", "out_proj.weight", "out_proj.bias", "norm.weight"]
    if config["adapter_model_dim"] != config["text_embed_dim"]:
        names += ["in_proj.weight", "in_proj.bias"]
    for i in range(config["adapter_layers"]):
        block = f"blocks.{i}."
        names += [f"{block}{attn}.{p}.weight" for attn in ("self_attn", "cross_attn")
                  for p in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")]
        names += [f"{block}norm_{n}.weight" for n in ("self_attn", "cross_attn", "mlp")]
        names += [f"{block}mlp.{n}.{p}" for n in (0, 2) for p in ("weight", "bias")]
    return [ADAPTER + name for name in names]


def rules(config: Mapping[str, Any]) -> list[Rule]:
    out = [Rule(f"{ref}.weight", (f"{ours}.weight",)) for ref, ours in _TOP]
    for i in range(config["num_layers"]):
        out += [Rule(f"blocks.{i}.{ref}.weight", (f"transformer_blocks.{i}.{ours}.weight",)) for ref, ours in _BLOCK]
    return out + [Rule(name, (name,)) for name in adapter_names(config)]


def config_from_shapes(shapes: Mapping[str, tuple[int, ...]], name: str) -> dict[str, Any]:
    """AnimaTransformer's config of a single file's DiT (and LLM adapter): the sizes from the tensor shapes."""
    (width, inputs), (head,), (outputs, _), (_, context), (lora, _), (hidden, _), (vocab, target), \
        (adapter_width, source), (adapter_head,) = layout.shapes_of(shapes, (
            "x_embedder.proj.1.weight", "blocks.0.self_attn.q_norm.weight", "final_layer.linear.weight",
            "blocks.0.cross_attn.k_proj.weight", "blocks.0.adaln_modulation_self_attn.1.weight",
            "blocks.0.mlp.layer1.weight", f"{ADAPTER}embed.weight", f"{ADAPTER}blocks.0.cross_attn.k_proj.weight",
            f"{ADAPTER}blocks.0.cross_attn.q_norm.weight"), name, "Anima")
    area = PATCH[0] * PATCH[1] * PATCH[2]
    return {"in_channels": inputs // area, "out_channels": outputs // area, "num_attention_heads": width // head,
            "attention_head_dim": head, "num_layers": count(shapes, "blocks."), "mlp_ratio": hidden / width,
            "text_embed_dim": context, "adaln_lora_dim": lora, "max_size": MAX_SIZE, "patch_size": PATCH,
            "rope_scale": ROPE_SCALE, "adapter_source_dim": source, "adapter_model_dim": adapter_width,
            "adapter_layers": count(shapes, f"{ADAPTER}blocks."), "adapter_heads": adapter_width // adapter_head,
            "adapter_vocab_size": vocab}


def to_diffusers(state: Mapping[str, torch.Tensor], config: Mapping[str, Any], name: str) -> dict[str, torch.Tensor]:
    """The file's tensors (nesting removed) -> AnimaTransformer's state dict."""
    return LAYOUT.to_diffusers({k: v for k, v in state.items() if k not in BUFFERS}, config, name)


def to_reference(state: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """AnimaTransformer's state dict -> the published file's tensors (under `net.`, the rope buffers included, as
    sd-scripts saves them)."""
    out = LAYOUT.to_reference(state, config)
    out.update(rope_buffers(config))
    return {f"{PREFIXES[0]}{k}": v for k, v in out.items()}


def rope_buffers(config: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The reference's rope buffers: positions up to the largest grid, each axis's frequency exponents."""
    head = config["attention_head_dim"]
    spatial = head // 6 * 2
    temporal = head - 2 * spatial
    grid = max(size // patch for size, patch in zip(config["max_size"], config["patch_size"]))
    return {BUFFERS[0]: torch.arange(grid, dtype=torch.float32),
            BUFFERS[1]: torch.arange(0, spatial, 2)[: spatial // 2].float() / spatial,
            BUFFERS[2]: torch.arange(0, temporal, 2)[: temporal // 2].float() / temporal}


LAYOUT = layout.Layout(PREFIXES, MARKER, rules)
strip_prefix = LAYOUT.strip_prefix
