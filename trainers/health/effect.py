"""The effect of a LoRA: the same prompt and seed rendered without and with it, compared per pixel."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

BARELY = 1.0  # mean absolute difference per pixel and channel (0-255) below which a LoRA barely changes the image


def difference(base: Path | Image.Image, with_lora: Path | Image.Image) -> float:
    """The mean absolute per-pixel difference (0-255) of two renders of one prompt and seed."""
    a, b = (np.asarray((Image.open(x) if isinstance(x, Path) else x).convert("RGB"), dtype=np.float32)
            for x in (base, with_lora))
    if a.shape != b.shape:
        raise ValueError(f"the two renders differ in size: {a.shape[:2]} and {b.shape[:2]}")
    return float(np.abs(a - b).mean())


def effect_warnings(base: Path | Image.Image, with_lora: Path | Image.Image) -> tuple[float, list[str]]:
    diff = difference(base, with_lora)
    if diff < BARELY:
        return diff, [f"this LoRA barely changes the image: the first sample prompt rendered with and without it "
                      f"differs by {diff:.3f} per pixel on average (below {BARELY:g} of 255)"]
    return diff, []
