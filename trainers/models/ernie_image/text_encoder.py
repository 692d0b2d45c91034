"""ERNIE-Image's text encoder from a file of its own (the `text_encoder` of its single files): Ministral 3's language
model in transformers' layout as ComfyUI's text_encoders files hold it (`model.layers...`; a Mistral3 file's
`language_model.` level and vision tower are taken too, the tower left out), read by the shared language-model
reader as a MistralModel; a scaled fp8 file's weights are multiplied by their scales first."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import nn

from trainers.models.component_files import llm_text_encoder
from trainers.models.ideogram4.scaled_fp8 import dequantized

if TYPE_CHECKING:
    from trainers.models.flow_rules import Part

LANGUAGE = ("model.language_model.", "language_model.", "model.")  # Mistral3ForConditionalGeneration's, Mistral3Model's
OTHER = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.", "lm_head.")


def load(part: "Part", state: Mapping[str, torch.Tensor], dtype: torch.dtype) -> nn.Module:
    return llm_text_encoder(dequantized(comfy_layout(state), dtype, "text_encoder"), part, dtype)


def file_state(part: "Part", module: nn.Module) -> dict[str, torch.Tensor]:
    """What `load` reads back: ComfyUI's layout (the language model under `model.`)."""
    return comfy_layout(module.state_dict())


def comfy_layout(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The language model's tensors under `model.`, whichever level a file keeps them at."""
    return {f"model.{k}": v for k, v in language_model(state, LANGUAGE, OTHER).items()}


def language_model(state: Mapping[str, torch.Tensor], levels: tuple[str, ...],
                   skipped: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """A multimodal model's language model by its own names: each key without the first of `levels` it starts with;
    the keys starting with one of `skipped` (a vision tower, a head) left out."""
    out = {}
    for key, value in state.items():
        if key.startswith(skipped):
            continue
        prefix = next((p for p in levels if key.startswith(p)), "")
        out[key[len(prefix):]] = value
    return out
