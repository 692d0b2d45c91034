"""Ideogram 4's text encoder from a file of its own (the `text_encoder` of its single files): Qwen3-VL 8B's language
model, as ComfyUI's text_encoders files hold it (`model.layers...`, Qwen3's names; transformers' Qwen3-VL layouts,
`model.language_model.` or `language_model.`, are taken too, their vision tower left out), scaled fp8 ones with each
weight times its scale. It is built as the Qwen3VLModel the family runs without its vision tower (captions are text
only); its sizes come from the shapes and the rest (rope, norms) from the published text config (text_encoder.json)."""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from trainers.models.base import ModelLoadError
from trainers.models.ideogram4.scaled_fp8 import dequantized
from trainers.models.reference_layout import count

if TYPE_CHECKING:
    from trainers.models.flow_rules import Part

TEXT_CONFIG = Path(__file__).with_name("text_encoder.json")  # Qwen/Qwen3-VL-8B-Instruct's text_config
LANGUAGE = ("model.language_model.", "language_model.", "model.")
OTHER = ("model.visual.", "visual.", "lm_head.")
ATTENTION = "layers.0.self_attn."


def load(part: "Part", state: Mapping[str, torch.Tensor], dtype: torch.dtype) -> nn.Module:
    from accelerate import init_empty_weights
    from transformers import Qwen3VLConfig, Qwen3VLModel

    from trainers.models.component_files import fill_meta

    weights = dequantized(language_model(state), dtype, "text_encoder")
    needed = ("embed_tokens.weight", f"{ATTENTION}q_proj.weight", f"{ATTENTION}q_norm.weight")
    if missing := [k for k in needed if k not in weights]:
        raise ModelLoadError(f"text_encoder: the file has no model.{missing[0]}: it is not a {part.what} in "
                             "transformers' (Qwen3) layout")
    text = json.loads(TEXT_CONFIG.read_text(encoding="utf-8"))
    head = weights[f"{ATTENTION}q_norm.weight"].shape[0]
    vocab, width = weights["embed_tokens.weight"].shape
    text.update(vocab_size=vocab, hidden_size=width, num_hidden_layers=count(weights, "layers."), head_dim=head,
                intermediate_size=weights["layers.0.mlp.gate_proj.weight"].shape[0],
                num_attention_heads=weights[f"{ATTENTION}q_proj.weight"].shape[0] // head,
                num_key_value_heads=weights[f"{ATTENTION}k_proj.weight"].shape[0] // head)
    half = head // 2  # text positions are the same on the three MRoPE axes, so the sections change nothing for
    side = 5 * half // 16  # captions; the published heads' (24, 20, 20) scaled to other widths
    text["rope_parameters"] = {**text["rope_parameters"], "mrope_section": [half - 2 * side, side, side]}
    text.update({k: None for k in ("bos_token_id", "eos_token_id") if text[k] >= vocab})
    with init_empty_weights():
        model = Qwen3VLModel(Qwen3VLConfig(text_config=text))
    del model.visual  # never read by captions; not in ComfyUI's file
    return fill_meta(model, {f"language_model.{k}": v for k, v in weights.items()}, dtype, part.what)


def file_state(part: "Part", module: nn.Module) -> dict[str, torch.Tensor]:
    """What `load` reads back: ComfyUI's layout (the language model under `model.`)."""
    return {f"model.{k}": v for k, v in language_model(module.state_dict()).items()}


def language_model(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The language model's tensors by their own names, whichever level a file keeps them at."""
    from trainers.models.ernie_image.text_encoder import language_model as own_names

    return own_names(state, LANGUAGE, OTHER)
