"""Lumina Image 2.0's transformer in the reference layout (Alpha-VLLM's NextDiT: `layers.N.attention.qkv`, the layout
of the single files sd-scripts and ComfyUI read) and in diffusers' Lumina2Transformer2DModel: its rules
(reference_layout.py), the inverse of diffusers' convert_lumina2_to_diffusers. A file's config comes from its tensor
shapes, and what they do not hold (rope, norms) from the published one (transformer.json)."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from trainers.models import nextdit
from trainers.models import reference_layout as layout
from trainers.models.base import ModelLoadError
from trainers.models.reference_layout import Rule, linear

MARKER = "cap_embedder."  # NextDiT's caption embedder: where the file nests the denoiser
PREFIXES = ("model.diffusion_model.", "diffusion_model.")  # ComfyUI's nesting of the transformer
BASE_CONFIG = Path(__file__).with_name("transformer.json")  # Alpha-VLLM/Lumina-Image-2.0's transformer config
UNUSED = "norm_final.weight"  # the reference's final norm, which its forward never reads (diffusers drops it)
QKV = "attention.qkv.weight"


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


def config_from_shapes(shapes: Mapping[str, tuple[int, ...]], name: str) -> dict[str, Any]:
    """Lumina2Transformer2DModel's config of a reference-layout transformer: its sizes from the tensor shapes, the
    rest as published (its feed-forward width rounded up to itself)."""
    found = nextdit.sizes(shapes, name, "Lumina 2")
    config = {"hidden_size": found.width, "in_channels": found.patch_inputs // 4, "num_layers": found.layers,
              "num_refiner_layers": found.refiners, "num_attention_heads": found.heads, "num_kv_heads": found.kv_heads,
              "multiple_of": shapes["layers.0.feed_forward.w1.weight"][0], "cap_feat_dim": found.caption_width}
    return nextdit.published(BASE_CONFIG, config, found.head, "hidden_size", "num_attention_heads", "axes_dim_rope")


def to_diffusers(state: Mapping[str, torch.Tensor], config: Mapping[str, Any], name: str) -> dict[str, torch.Tensor]:
    """Reference-layout tensors -> Lumina2Transformer2DModel's state dict (q wider than k and v: grouped heads)."""
    hidden = config["hidden_size"]
    kv = config["num_kv_heads"] * hidden // config["num_attention_heads"]
    fused = [rule for rule in _rules_of(config) if rule.reference.endswith(QKV)]
    out = LAYOUT.to_diffusers({k: v for k, v in state.items() if not k.endswith(QKV)}, config, name, skip=fused)
    for rule in fused:
        if rule.reference not in state:
            raise ModelLoadError(f"{name}: the transformer has no {rule.reference}: is the file complete?")
        out.update(zip(rule.parts, state[rule.reference].split([hidden, kv, kv])))
    return out


def _rules_of(config: Mapping[str, Any]) -> list[Rule]:
    return rules({"noise_refiner": config["num_refiner_layers"], "context_refiner": config["num_refiner_layers"],
                  "layers": config["num_layers"]})


LAYOUT = layout.Layout(PREFIXES, MARKER, _rules_of, lambda config: config["hidden_size"], unused=(UNUSED,))
strip_prefix, to_reference = LAYOUT.strip_prefix, LAYOUT.to_reference
