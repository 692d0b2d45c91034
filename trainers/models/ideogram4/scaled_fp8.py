"""ComfyUI's scaled fp8 files (Comfy-Org's `*_fp8_scaled.safetensors`) read back into a training dtype: each fp8
weight times its scale, as ComfyUI's loaders compute it. Two forms are published:

- the older one: a `scaled_fp8` marker tensor, `<layer>.scale_weight` beside each fp8 weight (and `.scale_input`,
  an activation scale that training does not use);
- the newer one (Comfy-Org's Ideogram 4 files): `<layer>.weight_scale` (one scale, or one per output row) with a
  `<layer>.comfy_quant` tensor holding the layer's format as JSON bytes (`{"format": "float8_e4m3fn"}`), and
  `.input_scale`.

Other formats of the newer form (nvfp4, int8) store weights that a scale alone does not give back: refused by name.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import torch

from trainers.models.base import ModelLoadError

if TYPE_CHECKING:
    from trainers.models.single_file.checkpoint import Checkpoint

MARKER = "scaled_fp8"
SCALES = (".scale_weight", ".weight_scale")  # the older form's, the newer form's
UNUSED = (".scale_input", ".input_scale", ".comfy_quant")  # activation scales and format records
FP8_FORMATS = ("float8_e4m3fn", "float8_e5m2")


def is_scaled(names: Iterable[str]) -> bool:
    """Whether a file's tensor names are those of a scaled fp8 file (either form)."""
    return any(k == MARKER or k.endswith((f".{MARKER}", *SCALES)) for k in names)


def without_scales(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The shapes of the weights a scaled file holds (its scales, markers and format records left out)."""
    return {k: v for k, v in shapes.items() if not _bookkeeping(k)}


def dequantized(state: Mapping[str, torch.Tensor], dtype: torch.dtype, file: str) -> dict[str, torch.Tensor]:
    """The tensors of a (possibly) scaled fp8 file with every scaled weight multiplied by its scale, in `dtype`;
    other tensors as they are. `file` names it in messages."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if _bookkeeping(key):
            continue
        layer = key.removesuffix(".weight")
        scale = next((state[layer + s] for s in SCALES if key.endswith(".weight") and layer + s in state), None)
        if scale is None:
            out[key] = value
            continue
        _check_format(state.get(layer + ".comfy_quant"), layer, file)
        out[key] = (value.to(torch.float32) * _broadcast(scale.to(torch.float32), value)).to(dtype)
    return out


def dequantized_checkpoint(ckpt: "Checkpoint", dtype: torch.dtype) -> "Checkpoint":
    """The checkpoint as a plain one: its shapes without the scales, its tensors dequantized into `dtype` when read
    (a file that is not scaled is returned as it is)."""
    if not is_scaled(ckpt.shapes):
        return ckpt
    name = ckpt.path.name
    return dataclasses.replace(ckpt, shapes=without_scales(ckpt.shapes),
                               _tensors=lambda prefix: dequantized(ckpt.tensors(prefix), dtype, name))


def _bookkeeping(key: str) -> bool:
    return key == MARKER or key.endswith((f".{MARKER}", *SCALES, *UNUSED))


def _broadcast(scale: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """A scale of one value, or of one value per output row ([out] or [out, 1]), shaped to multiply the weight."""
    if scale.numel() == 1:
        return scale.reshape(())
    if scale.numel() == weight.shape[0]:
        return scale.reshape(weight.shape[0], *([1] * (weight.ndim - 1)))
    raise ModelLoadError(f"a scale of shape {tuple(scale.shape)} does not fit a weight of shape {tuple(weight.shape)}")


def _check_format(record: torch.Tensor | None, layer: str, file: str) -> None:
    """The newer form's format record: only fp8 weights are given back by their scale."""
    if record is None:
        return
    try:
        found = json.loads(bytes(record.to(torch.uint8).flatten().tolist()).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ModelLoadError(f"{file}: the quantization record of {layer} (comfy_quant) is not readable") from None
    fmt = found.get("format", "") if isinstance(found, dict) else found
    if fmt not in FP8_FORMATS:
        raise ModelLoadError(f"{file} stores {layer} as {fmt or 'an unknown format'} (ComfyUI's comfy_quant), which "
                             "is not read here: use its fp8_scaled or bf16 file")
