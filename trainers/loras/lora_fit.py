"""Whether a LoRA's modules fit a model's layers in shape: a LoRA of another model whose module names match (an SD2
LoRA on SD1, one of an inpainting model on its base) is refused before anything changes, naming the first module
that does not fit and the family the LoRA looks like, instead of failing half-way with a size-mismatch traceback.
Fused modules (SD3's and FLUX's q, k and v as one, the family's `lora_targets`) are checked against their layers'
rows stacked, and LyCORIS modules (LoCon with Tucker, LoHa, LoKr, full) by the rows and columns of their change."""
from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import Tensor

from trainers.loras.layers import Target
from trainers.loras.lora_family import guess_family
from trainers.loras.lora_state import LoraFile
from trainers.models import LoadedModel

Shape = tuple[int, ...]


def _dims(tensor: Any) -> Shape:
    return tuple(int(s) for s in tensor.shape)


def change_shape(parts: Mapping[str, Any]) -> Shape | None:
    """The shape of the weight change a LoRA/LoCon module makes (up's rows, down's inputs, the kernel of LoCon's
    Tucker middle when it has one); None for other kinds. Parts: tensors, or anything with a shape."""
    down, up, mid = parts.get("lora_down.weight"), parts.get("lora_up.weight"), parts.get("lora_mid.weight")
    if down is None or up is None:
        return None
    if mid is not None:
        return (_dims(up)[0], _dims(down)[1], *_dims(mid)[2:])
    return (_dims(up)[0], *_dims(down)[1:])


def _rows_columns(rows: int, columns: Shape) -> Shape:
    return rows, math.prod(columns)


def lycoris_change(parts: Mapping[str, Any]) -> Shape | None:
    """(rows, columns) of the weight change a LyCORIS LoHa, LoKr or full module makes, its kernel folded into the
    columns (a conv's non-Tucker LoHa/LoKr stores it so); None for kinds without one (IA3, OFT, GLoRA...)."""
    get = {key: _dims(value) for key, value in parts.items() if hasattr(value, "shape")}.get
    if (diff := get("diff")) is not None:
        return _rows_columns(diff[0], diff[1:])
    if (w1a := get("hada_w1_a")) is not None and (w1b := get("hada_w1_b")) is not None:
        t1 = get("hada_t1")
        return _rows_columns(w1a[1], (w1b[1], *t1[2:])) if t1 is not None else (w1a[0], w1b[1])
    w1, w1a, w1b = get("lokr_w1"), get("lokr_w1_a"), get("lokr_w1_b")
    if w1 is None and (w1a is None or w1b is None):
        return None
    out1, in1 = (w1[0], math.prod(w1[1:])) if w1 is not None else (w1a[0], w1b[1])  # type: ignore[index]
    w2, w2a, w2b, t2 = get("lokr_w2"), get("lokr_w2_a"), get("lokr_w2_b"), get("lokr_t2")
    if w2 is not None:
        out2, in2 = w2[0], math.prod(w2[1:])
    elif w2a is not None and w2b is not None:
        out2, in2 = (w2a[1], w2b[1] * math.prod(t2[2:])) if t2 is not None else (w2a[0], w2b[1])
    else:
        return None
    return out1 * out2, in1 * in2


def _core(shape: Shape) -> Shape:
    """A 1x1 conv and a linear layer take the same change (SD1's proj_in is a 1x1 conv, SD2's a linear layer)."""
    while len(shape) > 2 and shape[-1] == 1:
        shape = shape[:-1]
    return shape


def fits(change: Shape, weight: Shape) -> bool:
    return _core(tuple(change)) == _core(tuple(weight))


def first_misfit(modules: Mapping[str, Mapping[str, Any]],
                 weights: Mapping[str, Shape]) -> tuple[str, Shape, Shape] | None:
    """(module, its change's shape, the layer's weight shape) of the first module whose layer has another shape (a
    LyCORIS module's as rows and columns)."""
    for name, parts in modules.items():
        weight = weights.get(name)
        if weight is None:
            continue
        change = change_shape(parts)
        if change is not None and not fits(change, weight):
            return name, change, tuple(weight)
        flat = lycoris_change(parts) if change is None else None
        if flat is not None and flat != _rows_columns(weight[0], tuple(weight[1:])):
            return name, flat, _rows_columns(weight[0], tuple(weight[1:]))
    return None


def _shape_text(shape: Shape) -> str:
    return " x ".join(str(s) for s in shape)


def misfit_text(lora: LoraFile, model: LoadedModel, misfit: tuple[str, Shape, Shape]) -> str:
    """What a user reads: which module does not fit, what the LoRA looks like it is for, and what to do."""
    name, change, weight = misfit
    family = model.family
    guess = guess_family(lora)
    if guess.found is not None and guess.found.name != family.name:
        told = f"it looks like a LoRA for {guess.text()}"
    elif guess.found is not None:
        told = (f"it is a {guess.found.title} LoRA ({guess.how}) of a model with other layer sizes (another variant, "
                "e.g. an inpainting one)")
    else:
        told = f"it is a LoRA of another model (its family: {guess.text()})"
    return (f"{lora.path.name}: module {name} changes a {_shape_text(change)} weight, but that layer of this "
            f"{family.title} model is {_shape_text(weight)}; {told}: use it with the model it was trained on")


def layer_shapes(targets: Mapping[str, Target]) -> dict[str, Shape]:
    return {name: target.shape() for name, target in targets.items()}


def check_fit(lora: LoraFile, modules: Mapping[str, Mapping[str, Tensor]], model: LoadedModel,
              targets: Mapping[str, Target]) -> str | None:
    """The message for a LoRA whose modules (kohya names) do not all fit the model's layers, None when they do."""
    misfit = first_misfit(modules, layer_shapes(targets))
    return misfit_text(lora, model, misfit) if misfit is not None else None


def misfit_for_generate(path: str, state: Mapping[str, Tensor], model: LoadedModel) -> str | None:
    """Generate's check of a kohya-named LoRA or LyCORIS file against the loaded model's own layers: each layer
    under its kohya name (as LyCORIS wraps them), and the family's fused modules (SD3's and FLUX's q, k, v) with
    their layers' rows stacked, as its LoRA files name them."""
    from safetensors import safe_open

    from trainers.loras.lycoris_files import kohya_modules
    from trainers.loras.layers import layer_map

    weights = {name: tuple(layer.weight.shape) for name, layer in kohya_modules(model).items()
               if isinstance(getattr(layer, "weight", None), Tensor)}
    weights.update(layer_shapes(layer_map(model)))
    lora = LoraFile(Path(path), dict(state), {})
    misfit = first_misfit(lora.modules, weights)
    if misfit is None:
        return None
    with safe_open(path, framework="pt") as handle:
        lora.metadata = dict(handle.metadata() or {})
    return misfit_text(lora, model, misfit)
