"""kohya LoRA files of the flow families as diffusers pipelines load them (PEFT names, alpha folded in).

The files name the modules of the reference implementations, where one layer computes q, k and v (FLUX's
linear1 also the MLP input); the diffusers models split those layers. diffusers reads kohya FLUX files itself,
but only at the real model's sizes, and not kohya SD3 files at all; this works for any size from the family's
LoraTargets (the same table the LoRA network is built from), so what is trained is what renders.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from trainers.models.base import LoadedModel, LoraTarget
from trainers.models.pending_encoders import read_pending


def kohya_to_diffusers(state: dict[str, torch.Tensor], model: LoadedModel, targets: Sequence[LoraTarget],
                       text_encoder_names: Sequence[str | None]) -> dict[str, torch.Tensor]:
    """`state` (kohya keys) as `transformer.<module>.lora_A/B.weight` and `<text encoder>.<module>.lora_A/B.weight`
    keys. `text_encoder_names`: the pipeline's name of each text encoder, None for one it cannot load LoRAs into.
    Raises ValueError for modules the model does not have."""
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    paths = {id(module): path for path, module in model.unet.named_modules()}
    for target in targets:
        if f"{target.name}.lora_down.weight" not in state:
            continue
        down, up, scale = _module(state, target.name, used)
        start = 0
        for layer, order in zip(target.layers, target.rows or (None,) * len(target.layers)):
            count = layer.out_features if order is None else len(order)
            segment = up[start:start + count]
            if order is not None:  # the file's rows are the layer's rows in `order`
                segment = torch.empty_like(segment).index_copy_(0, order.to(segment.device), segment)
            out[f"transformer.{paths[id(layer)]}.lora_A.weight"] = down * scale
            out[f"transformer.{paths[id(layer)]}.lora_B.weight"] = segment
            start += count
    encoders = model.text_encoders
    if any(key.startswith("lora_te") for key in state):
        read_pending(encoders)  # their layers' names are read: deferred encoders are read
    for index, (encoder, pipeline_name) in enumerate(zip(encoders, text_encoder_names)):
        prefix = "lora_te_" if len(encoders) == 1 else f"lora_te{index + 1}_"
        for path, module in encoder.named_modules():
            name = prefix + ("text_model." + path.removeprefix("text_model.")).replace(".", "_")
            if not isinstance(module, nn.Linear) or f"{name}.lora_down.weight" not in state:
                continue
            if pipeline_name is None:
                raise ValueError(f"{name}: the pipeline cannot load LoRAs into text encoder {index + 1}")
            down, up, scale = _module(state, name, used)
            out[f"{pipeline_name}.{path}.lora_A.weight"] = down * scale
            out[f"{pipeline_name}.{path}.lora_B.weight"] = up
    unknown = sorted(set(state) - used)
    if unknown:
        raise ValueError(f"{len(unknown)} tensors name no module of this {model.family.title} model, e.g. {unknown[0]}")
    return out


def _module(state: dict[str, torch.Tensor], name: str, used: set[str]) -> tuple[torch.Tensor, torch.Tensor, float]:
    keys = [f"{name}.lora_down.weight", f"{name}.lora_up.weight", f"{name}.alpha"]
    used.update(keys)
    down, up = state[keys[0]].float(), state[keys[1]].float()
    alpha = state.get(keys[2])
    rank = down.shape[0]
    return down, up, (float(alpha) if alpha is not None else rank) / rank
