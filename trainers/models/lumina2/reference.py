"""Lumina Image 2.0's transformer in the reference layout (Alpha-VLLM's NextDiT: `layers.N.attention.qkv`, the layout
of the single files sd-scripts and ComfyUI read) and in diffusers' Lumina2Transformer2DModel: its rules
(reference_layout.py), the inverse of diffusers' convert_lumina2_to_diffusers."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from trainers.models import reference_layout as layout
from trainers.models.reference_layout import Rule, linear


def rules(blocks: Mapping[str, int]) -> list[Rule]:
    """`blocks`: how many of each kind (noise_refiner, context_refiner, layers) the transformer has."""
    out: list[Rule] = [*linear("x_embedder", "x_embedder"),
                       *linear("t_embedder.mlp.0", "time_caption_embed.timestep_embedder.linear_1"),
                       *linear("t_embedder.mlp.2", "time_caption_embed.timestep_embedder.linear_2"),
                       Rule("cap_embedder.0.weight", ("time_caption_embed.caption_embedder.0.weight",)),
                       *linear("cap_embedder.1", "time_caption_embed.caption_embedder.1"),
                       *linear("final_layer.adaLN_modulation.1", "norm_out.linear_1"),
                       *linear("final_layer.linear", "norm_out.linear_2")]
    for kind, count in blocks.items():
        for i in range(count):
            ref, ours = f"{kind}.{i}.", f"{kind}.{i}."
            modulated = kind != "context_refiner"
            weights = [("attention.qkv", ("attn.to_q", "attn.to_k", "attn.to_v")), ("attention.out", ("attn.to_out.0",)),
                       ("attention.q_norm", ("attn.norm_q",)), ("attention.k_norm", ("attn.norm_k",)),
                       ("attention_norm1", ("norm1.norm" if modulated else "norm1",)),
                       ("attention_norm2", ("norm2",)), ("ffn_norm1", ("ffn_norm1",)), ("ffn_norm2", ("ffn_norm2",)),
                       *((f"feed_forward.w{n}", (f"feed_forward.linear_{n}",)) for n in (1, 2, 3))]
            out += [Rule(f"{ref}{name}.weight", tuple(f"{ours}{p}.weight" for p in parts)) for name, parts in weights]
            if modulated:
                out += linear(f"{ref}adaLN_modulation.1", f"{ours}norm1.linear")
    return out


def to_reference(state: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Lumina2Transformer2DModel's state dict -> reference-layout tensors, with the reference's unused final norm
    (norm_final, which diffusers drops) as an identity so that strict loaders find every tensor."""
    blocks = {"noise_refiner": config["num_refiner_layers"], "context_refiner": config["num_refiner_layers"],
              "layers": config["num_layers"]}
    out = layout.to_reference(state, rules(blocks))
    width = config["hidden_size"]
    out["norm_final.weight"] = torch.ones(width, dtype=state["x_embedder.weight"].dtype,
                                          device=state["x_embedder.weight"].device)
    return out
