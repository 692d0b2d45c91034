"""Per-block ratios of a merge (sd-scripts' --lbws, A1111's LoRA Block Weight): which of the 26 blocks (BASE for
the text encoders, IN00-IN11, MID, OUT00-OUT11) a kohya module is in, and the layouts of 12, 17, 20 and 26 numbers.

The numbering is sd-scripts' (svd_merge_lora.py): SD1/SD2 name their UNet modules the diffusers way (17 or 26
numbers), SDXL the SGM way (12 or 20 numbers: its UNet has fewer blocks). Torch-free.
"""
from __future__ import annotations

import re

BLOCKS = ("BASE", *(f"IN{i:02d}" for i in range(12)), "MID", *(f"OUT{i:02d}" for i in range(12)))


def _named(*names: str) -> tuple[int, ...]:
    return tuple(BLOCKS.index(name) for name in names)


def _span(prefix: str, first: int, last: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i:02d}" for i in range(first, last + 1))


# number of values -> (the blocks they set, in order; the UNet key style they are for)
LAYOUTS: dict[int, tuple[tuple[int, ...], str]] = {
    12: (_named("BASE", "IN04", "IN05", "IN07", "IN08", "MID", *_span("OUT", 0, 5)), "sgm"),
    17: (_named("BASE", "IN01", "IN02", "IN04", "IN05", "IN07", "IN08", "MID", *_span("OUT", 3, 11)), "diffusers"),
    20: (_named("BASE", *_span("IN", 0, 8), "MID", *_span("OUT", 0, 8)), "sgm"),
    26: (tuple(range(len(BLOCKS))), "diffusers"),
}
_UPDOWN = re.compile(r"(up|down)_blocks_(\d+)_(resnets|upsamplers|downsamplers|attentions)_(\d+)_")
_SIDES = 12  # down (and up) blocks of the 26


def parse_block_weights(text: str) -> list[float]:
    """One line of --lbws: numbers separated by commas (brackets allowed); 1, 12, 17, 20 or 26 of them."""
    inner = text.strip().removeprefix("[").removesuffix("]")
    try:
        values = [float(part) for part in inner.split(",")]
    except ValueError:
        raise ValueError(f"{text.strip()!r} is not comma-separated numbers") from None
    if len(values) != 1 and len(values) not in LAYOUTS:
        raise ValueError(f"{len(values)} numbers: give one (every block) or 12, 17, 20 or 26 (A1111's LoRA Block "
                         "Weight layouts)")
    return values


def block_of(lora_name: str, key_style: str) -> int:
    """The index in BLOCKS of a kohya module (0 for a text encoder's), -1 when it is in none (sd-scripts' rules)."""
    if lora_name.startswith("lora_te"):
        return 0
    if not lora_name.startswith("lora_unet_"):
        return -1
    if key_style == "sgm":
        name = lora_name.removeprefix("lora_unet_")
        for prefix, start in (("time_embed_", 1), ("label_emb_", 1), ("input_blocks_", None), ("middle_block_", 13),
                              ("output_blocks_", None), ("out_", 23)):
            if name.startswith(prefix):
                if start is not None:
                    return start
                index = int(name.split("_")[2])
                return 1 + index if prefix == "input_blocks_" else 14 + index
        return -1
    found = _UPDOWN.search(lora_name)
    if found:
        side, i, kind, j = found[1], int(found[2]), found[3], int(found[4])
        if side == "down":
            return 1 + (3 * (i + 1) if kind == "downsamplers" else 3 * i + j + 1)
        return 2 + _SIDES + (3 * i + 2 if kind == "upsamplers" else 3 * i + j)
    return 1 + _SIDES if "mid_block_" in lora_name else -1


class BlockWeights:
    """The ratio of each block from one --lbws line (blocks it does not set keep 1; one number sets them all)."""

    def __init__(self, values: list[float], key_style: str) -> None:
        self.key_style = key_style
        self.every = values[0] if len(values) == 1 else None
        self.values = [1.0] * len(BLOCKS)
        if len(values) == 1:
            return
        indices, style = LAYOUTS[len(values)]
        if style != key_style:
            counts = " or ".join(str(n) for n, (_, s) in LAYOUTS.items() if s == key_style)
            wanted = f"give {counts} numbers" if counts else "give one number (blocks are SD1, SD2 and SDXL's)"
            raise ValueError(f"{len(values)} block weights are a layout of {_STYLES[style]}, and this LoRA's UNet "
                             f"modules are named {_STYLES.get(key_style, 'after its own model')}: {wanted}")
        for index, value in zip(indices, values):
            self.values[index] = value

    def of(self, lora_name: str) -> float:
        if self.every is not None:
            return self.every
        index = block_of(lora_name, self.key_style)
        return self.values[index] if index >= 0 else 1.0


_STYLES = {"sgm": "the SGM way (SDXL)", "diffusers": "the diffusers way (SD1, SD2)"}
