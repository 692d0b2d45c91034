"""Ideogram 4's transformer in its reference layout (Comfy-Org's diffusion_models/ideogram4_*.safetensors, which
ComfyUI and musubi-tuner's --dit read): diffusers' names but for each block's fused `attention.qkv` (to_q, to_k, to_v
stacked by rows) and `attention.o` (to_out.0), the names diffusers' own LoRA conversion
(_convert_non_diffusers_ideogram4_lora_to_diffusers) maps. The config comes from the tensor shapes, and what they do
not hold (rope, norms) from the published one (arch/transformer.json)."""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.models import reference_layout as layout
from trainers.models.base import ModelLoadError
from trainers.models.reference_layout import Rule, count, linear, shapes_of

MARKER = "embed_image_indicator."  # its own embedding: where a file nests the denoiser
PREFIXES = ("model.diffusion_model.", "diffusion_model.")  # ComfyUI's nesting of the transformer
BASE_CONFIG = Path(__file__).with_name("arch") / "transformer.json"  # the published transformer's config
TITLE = "Ideogram 4"
GLOBAL = ("input_proj", "llm_cond_proj", "t_embedding.mlp_in", "t_embedding.mlp_out", "adaln_proj",
          "final_layer.linear", "final_layer.adaln_modulation")
BLOCK = ("attention.norm_q", "attention.norm_k", "feed_forward.w1", "feed_forward.w2", "feed_forward.w3",
         "attention_norm1", "ffn_norm1", "attention_norm2", "ffn_norm2")


def rules(layers: int) -> list[Rule]:
    out: list[Rule] = [rule for name in GLOBAL for rule in linear(name, name)]
    out += [Rule("llm_cond_norm.weight", ("llm_cond_norm.weight",)),
            Rule("embed_image_indicator.weight", ("embed_image_indicator.weight",))]
    for i in range(layers):
        block = f"layers.{i}."
        out.append(Rule(f"{block}attention.qkv.weight", tuple(f"{block}attention.to_{p}.weight" for p in "qkv")))
        out.append(Rule(f"{block}attention.o.weight", (f"{block}attention.to_out.0.weight",)))
        out += [Rule(f"{block}{name}.weight", (f"{block}{name}.weight",)) for name in BLOCK]
        out += linear(f"{block}adaln_modulation", f"{block}adaln_modulation")
    return out


def config_from_shapes(shapes: Mapping[str, tuple[int, ...]], name: str) -> dict[str, Any]:
    """Ideogram4Transformer2DModel's config of a file's transformer: widths, depth and heads from the shapes (a
    head's width is its query norm's), the rest as published. Its rope sections are the published heads' (the
    file does not hold them): a transformer of other head widths is refused by name."""
    embed, norm, w1, adaln, text = shapes_of(shapes, (
        "input_proj.weight", "layers.0.attention.norm_q.weight", "layers.0.feed_forward.w1.weight",
        "adaln_proj.weight", "llm_cond_proj.weight"), name, TITLE)
    config = json.loads(BASE_CONFIG.read_text(encoding="utf-8"))
    head = norm[0]
    if head != config["attention_head_dim"]:
        raise ModelLoadError(f"{name}: the {TITLE} transformer's heads are {head} wide; its rope sections are known "
                             f"for the published {config['attention_head_dim']} only")
    config.update(in_channels=embed[1], num_attention_heads=embed[0] // head, num_layers=count(shapes, "layers."),
                  intermediate_size=w1[0], adaln_dim=adaln[0], llm_features_dim=text[1])
    return {k: v for k, v in config.items() if not k.startswith("_")}


def _rules_of(config: Mapping[str, Any]) -> list[Rule]:
    return rules(config["num_layers"])


LAYOUT = layout.Layout(PREFIXES, MARKER, _rules_of)
strip_prefix, to_diffusers, to_reference = LAYOUT.strip_prefix, LAYOUT.to_diffusers, LAYOUT.to_reference
