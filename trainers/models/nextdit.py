"""What the reference (NextDiT) layouts of Lumina 2 and Z-Image share: the sizes their single files' tensor shapes
tell, and the published config that holds the rest (their reference.py modules map the names)."""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.models import reference_layout as layout


@dataclass(frozen=True)
class Sizes:
    width: int
    patch_inputs: int  # the patch embedder's inputs: channels x patch area
    head: int  # attention head width (from the per-head q norm)
    heads: int
    kv_heads: int
    layers: int
    refiners: int
    caption_width: int  # the text encoder's width the caption embedder reads


def sizes(shapes: Mapping[str, tuple[int, ...]], name: str, title: str) -> Sizes:
    """A NextDiT transformer's sizes from its tensor shapes; a missing tensor named."""
    (width, patch_inputs), (head,), (qkv, _), (_, caption_width) = layout.shapes_of(
        shapes, ("x_embedder.weight", "layers.0.attention.q_norm.weight", "layers.0.attention.qkv.weight",
                 "cap_embedder.1.weight"), name, title)
    return Sizes(width, patch_inputs, head, width // head, (qkv - width) // 2 // head, layout.count(shapes, "layers."),
                 layout.count(shapes, "noise_refiner."), caption_width)


def published(path: Path, found: Mapping[str, Any], head: int, width: str, heads: str, axes: str) -> dict[str, Any]:
    """The published config at `path` with the sizes `found`, its rope axes scaled to the head width `head` in the
    published proportions (`width`, `heads`, `axes`: the config's names of the width, head count and axes)."""
    base = json.loads(path.read_text(encoding="utf-8"))
    base_head = base[width] // base[heads]
    scaled = [axis * head // base_head for axis in base[axes]]
    return {**{k: v for k, v in base.items() if not k.startswith("_")}, **found, axes: scaled}
