"""UNet blocks of kohya's block-wise LoRA options (torch-free): which block a module is in, and the per-block
ranks, alphas and learning-rate weights, read from their comma-separated strings as sd-scripts reads them.

Blocks are numbered as in sd-scripts' networks/lora.py: SD1.x/2.x have 12 down blocks, 1 mid block and 12 up
blocks (25 in all; block 0 has no LoRA); SDXL has the input embedding (0), 9 input blocks, 3 middle blocks,
9 output blocks and the output (22): 23 in all.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

_UPDOWN = re.compile(r"(up|down)_blocks_(\d+)_(resnets|upsamplers|downsamplers|attentions)_(\d+)_")
_CURVES = ("cosine", "sine", "linear", "reverse_linear", "zeros")


@dataclass(frozen=True)
class BlockLayout:
    """How many blocks a UNet key style has: `sides` down (and as many up) blocks, `mids` middle ones."""

    sides: int
    mids: int
    edges: bool  # SDXL: an input embedding block before and an output block after

    @property
    def total(self) -> int:
        return self.sides * 2 + self.mids + (2 if self.edges else 0)


LAYOUTS = {"diffusers": BlockLayout(12, 1, False), "sgm": BlockLayout(9, 3, True)}


def block_index(lora_name: str, key_style: str) -> int:
    """The block of a `lora_unet_...` module, -1 when it is in none (kohya's get_block_index)."""
    if key_style == "diffusers":
        m = _UPDOWN.search(lora_name)
        if m:
            i, kind, j = int(m[2]), m[3], int(m[4])
            idx = 3 * i + (2 if kind in ("upsamplers", "downsamplers") else j)
            return 1 + idx if m[1] == "down" else LAYOUTS["diffusers"].sides + 1 + idx
        return LAYOUTS["diffusers"].sides if "mid_block_" in lora_name else -1
    name = lora_name.removeprefix("lora_unet_")
    if not lora_name.startswith("lora_unet_"):
        return -1
    if name.startswith(("time_embed_", "label_emb_")):
        return 0
    for prefix, start in (("input_blocks_", 1), ("middle_block_", 10), ("output_blocks_", 13)):
        if name.startswith(prefix):
            return start + int(name.split("_")[2])
    return 22 if name.startswith("out_") else -1


def parse_numbers(text: str, option: str, count: int, whole: bool = False) -> list[float]:
    """`count` comma-separated numbers; ValueError names the option and the count wanted."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        values = [int(p) if whole else float(p) for p in parts]
    except ValueError:
        kind = "whole numbers" if whole else "numbers"
        raise ValueError(f"{option}: {text!r} is not {count} comma-separated {kind}") from None
    if len(values) != count:
        raise ValueError(f"{option}: has {len(values)} values; this model's UNet has {count} blocks, give {count}")
    if any(v < 0 for v in values):
        raise ValueError(f"{option}: values must not be negative")
    return values


def _side_weights(text: str, option: str, count: int) -> list[float]:
    """down/up weights: numbers (missing ones are 1, extra ones ignored) or a curve such as `cosine+0.5`."""
    if "," not in text:
        name, _, base = text.partition("+")
        if name in _CURVES:
            try:
                offset = float(base) if base else 0.0
            except ValueError:
                raise ValueError(f"{option}: {text!r}: the part after '+' must be a number") from None
            ramp = [i / (count - 1) for i in range(count)]
            curve = {"cosine": [math.sin(math.pi * r / 2) for r in reversed(ramp)],
                     "sine": [math.sin(math.pi * r / 2) for r in ramp], "linear": ramp,
                     "reverse_linear": list(reversed(ramp)), "zeros": [0.0] * count}[name]
            return [v + offset for v in curve]
    try:
        values = [float(p) if p.strip() else 0.0 for p in text.split(",")]
    except ValueError:
        raise ValueError(f"{option}: {text!r} is neither comma-separated numbers nor one of "
                         f"{', '.join(_CURVES)} (optionally +offset)") from None
    return (values + [1.0] * count)[:count]


def block_lr_weights(key_style: str, down: str, mid: str, up: str, zero_threshold: float) -> list[float] | None:
    """Per-block learning-rate multipliers (None when none of the three is set), as sd-scripts builds them."""
    if not (down or mid or up):
        return None
    layout = LAYOUTS[key_style]
    down_w = _side_weights(down, "down_lr_weight", layout.sides) if down else [1.0] * layout.sides
    up_w = _side_weights(up, "up_lr_weight", layout.sides) if up else [1.0] * layout.sides
    try:
        mid_w = ([float(p) if p.strip() else 0.0 for p in mid.split(",")] + [1.0] * layout.mids)[:layout.mids] \
            if mid else [1.0] * layout.mids
    except ValueError:
        raise ValueError(f"mid_lr_weight: {mid!r} is not comma-separated numbers") from None
    given = [(down_w, bool(down)), (mid_w, bool(mid)), (up_w, bool(up))]
    weights = [w if not set_ or w > zero_threshold else 0.0 for part, set_ in given for w in part]
    return [1.0, *weights, 1.0] if layout.edges else weights
