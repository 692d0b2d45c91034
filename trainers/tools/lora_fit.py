"""Whether a LoRA's modules fit a model's layers in shape: a LoRA of another model whose module names match (an SD2
LoRA on SD1, one of an inpainting model on its base) is refused before anything changes, naming the first module
that does not fit and the family the LoRA looks like, instead of failing half-way with a size-mismatch traceback."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from torch import Tensor

from trainers.models import LoadedModel
from trainers.tools.lora_family import guess_family
from trainers.tools.layers import Target
from trainers.tools.lora_state import LoraFile

Shape = tuple[int, ...]


def change_shape(parts: Mapping[str, Tensor]) -> Shape | None:
    """The shape of the weight change a LoRA/LoCon module makes (up's rows, down's inputs); None for other kinds."""
    down, up = parts.get("lora_down.weight"), parts.get("lora_up.weight")
    if down is None or up is None:
        return None
    return (int(up.shape[0]), *(int(s) for s in down.shape[1:]))


def _core(shape: Shape) -> Shape:
    """A 1x1 conv and a linear layer take the same change (SD1's proj_in is a 1x1 conv, SD2's a linear layer)."""
    while len(shape) > 2 and shape[-1] == 1:
        shape = shape[:-1]
    return shape


def fits(change: Shape, weight: Shape) -> bool:
    return _core(tuple(change)) == _core(tuple(weight))


def first_misfit(modules: Mapping[str, Mapping[str, Tensor]],
                 weights: Mapping[str, Shape]) -> tuple[str, Shape, Shape] | None:
    """(module, its change's shape, the layer's weight shape) of the first module whose layer has another shape."""
    for name, parts in modules.items():
        change, weight = change_shape(parts), weights.get(name)
        if change is not None and weight is not None and not fits(change, weight):
            return name, change, tuple(weight)
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
    """Generate's check of a kohya-named LoRA against the loaded model's own layers (fused SD3/FLUX modules are left
    to diffusers' loader, which names them itself)."""
    from safetensors import safe_open

    from trainers.generate.lycoris_files import kohya_modules

    weights = {name: tuple(layer.weight.shape) for name, layer in kohya_modules(model).items()
               if isinstance(getattr(layer, "weight", None), Tensor)}
    lora = LoraFile(Path(path), dict(state), {})
    misfit = first_misfit(lora.modules, weights)
    if misfit is None:
        return None
    with safe_open(path, framework="pt") as handle:
        lora.metadata = dict(handle.metadata() or {})
    return misfit_text(lora, model, misfit)
