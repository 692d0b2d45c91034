"""A network's optimizer parameter groups, as sd-scripts builds them: UNet and text-encoder learning rates (one per
text encoder), per-block learning-rate weights and LoRA+ (the up matrices at `ratio` times the learning rate)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from torch import nn

from trainers.methods.lora.blocks import block_index


@dataclass(frozen=True)
class LearningRates:
    unet: float
    text_encoders: list[float]  # one per text encoder; the last one serves any further encoder
    block_weights: list[float] | None = None  # per UNet block (see blocks.py)
    loraplus_unet: float | None = None
    loraplus_text_encoder: float | None = None

    def for_text_encoder(self, index: int) -> float:
        return self.text_encoders[min(index, len(self.text_encoders) - 1)]


def text_encoder_of(name: str) -> int:
    """0-based text encoder of a `lora_te_`, `lora_te1_`, `lora_te2_` module name."""
    tail = name.removeprefix("lora_te")
    return int(tail[0]) - 1 if tail[:1].isdigit() else 0


def param_groups(modules: Iterable[tuple[str, nn.Module]], rates: LearningRates, key_style: str) -> list[dict[str, Any]]:
    """UNet groups first (the reported learning rate is the first group's), then each text encoder's.

    A group whose learning rate is 0 is left out, as sd-scripts does: its weights never change.
    """
    groups: dict[tuple, dict[str, Any]] = {}
    for name, module in modules:
        if name.startswith("lora_unet"):
            block = block_index(name, key_style) if rates.block_weights is not None else -1
            lr = rates.unet * (rates.block_weights[block] if rates.block_weights is not None and block >= 0 else 1.0)
            ratio, key, label = rates.loraplus_unet, (0, block), "unet" + (f"_block{block}" if block >= 0 else "")
        else:
            te = text_encoder_of(name)
            lr, ratio, key, label = rates.for_text_encoder(te), rates.loraplus_text_encoder, (1, te), f"textencoder{te + 1}"
        for pname, param in module.named_parameters():
            plus = ratio is not None and "lora_up" in pname
            group = groups.setdefault(key + (plus,), {"params": [], "lr": lr * (ratio if plus else 1.0),
                                                      "name": label + (" plus" if plus else "")})
            group["params"].append(param)
    return [g for _, g in sorted(groups.items(), key=lambda kv: kv[0]) if g["lr"]]
