"""The training adapter of a distilled base (trainers/models/distilled.py): a frozen LoRA on the denoiser, applied
while training and switched off for samples.

It is attached as forward hooks that add `multiplier * up(down(x)) * alpha / rank` to each layer's output, not merged
into the weights: the base's weights stay as loaded (so no save, a finetune's neither, holds any of it; a quantized
or block-swapped base takes it alike), and switching it off is exact (no merge and unmerge rounding in bf16). The
hooks keep their tensors outside the modules' state, so they never reach a state dict.

The adapter file may name its layers as diffusers does (`transformer.` / `diffusion_model.` + a module path +
`.lora_A/lora_B.weight`: ostris' published adapters) or as the family's kohya LoRAs do (`lora_unet_...`).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.models.base import LoadedModel

OPTION = "training_adapter"
PREFIXES = ("transformer.", "diffusion_model.", "base_model.model.", "model.diffusion_model.")


class AdapterHook:
    """One layer's adapter: its output gains `scale * (x @ down.T) @ up.T` while `enabled`."""

    def __init__(self, down: torch.Tensor, up: torch.Tensor, scale: float) -> None:
        self.down, self.up, self.scale = down, up, scale
        self.enabled = True
        self._placed: dict[tuple[torch.device, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(self, module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor | None:
        if not self.enabled or not args or not isinstance(output, torch.Tensor):
            return None
        x = args[0]
        key = (x.device, x.dtype)
        if key not in self._placed:  # once per device and dtype (block swap moves the layer, not these)
            self._placed[key] = (self.down.to(*key), self.up.to(*key))
        down, up = self._placed[key]
        return output + (x @ down.T) @ up.T * self.scale


def attach_training_adapter(model: LoadedModel, path: Path, multiplier: float) -> int:
    """Hook the adapter file at `path` onto `model`'s denoiser, weighted `multiplier`; returns the layers it
    adapts. Raises ConfigError naming training_adapter for a file that does not fit the model."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        state = load_file(str(path))
    except (OSError, SafetensorError) as err:
        raise _bad(f"cannot read {path}: {err}") from None
    pairs = _pairs(_in_module_paths(state, model, path), path)
    modules = dict(model.unet.named_modules())
    missing = sorted(name for name in pairs if name not in modules)
    if missing:
        raise _bad(f"{path} adapts {len(missing)} layers this {model.family.title} model does not have (e.g. "
                   f"{missing[0]}): is it the training adapter of another model?")
    for name, (down, up, _) in pairs.items():  # every layer checked before any is hooked
        layer = modules[name]
        ins, outs = getattr(layer, "in_features", None), getattr(layer, "out_features", None)
        if (ins, outs) != (down.shape[1], up.shape[0]):
            raise _bad(f"{path} does not fit this {model.family.title} model: its {name} maps {down.shape[1]} to "
                       f"{up.shape[0]} features, the model's layer {ins} to {outs}")
    for name, (down, up, scale) in pairs.items():
        layer = modules[name]
        dtype = layer.weight.dtype if isinstance(getattr(layer, "weight", None), torch.Tensor) and \
            layer.weight.dtype.is_floating_point else torch.float32
        layer.register_forward_hook(AdapterHook(down.to(dtype), up.to(dtype), scale * multiplier))
    return len(pairs)


def adapter_hooks(module: nn.Module) -> list[AdapterHook]:
    """The adapter hooks on `module` and its children (through wrappers such as DDP's)."""
    return [hook for child in module.modules() for hook in child._forward_hooks.values()
            if isinstance(hook, AdapterHook)]


@contextlib.contextmanager
def training_adapter_off(module: nn.Module) -> Iterator[None]:
    """`module` without its training adapter for the duration (samples show what the saved weights give)."""
    hooks = [hook for hook in adapter_hooks(module) if hook.enabled]
    for hook in hooks:
        hook.enabled = False
    try:
        yield
    finally:
        for hook in hooks:
            hook.enabled = True


def _bad(message: str) -> ConfigError:
    return ConfigError([ConfigIssue(OPTION, message, "flow")])


def _in_module_paths(state: dict[str, torch.Tensor], model: LoadedModel, path: Path) -> dict[str, torch.Tensor]:
    """The file's tensors named `<module path>.lora_A/lora_B.weight` (and `.alpha`): a kohya file converted through
    the family's LoRA targets, alpha folded in."""
    if not any(key.startswith("lora_") for key in state):
        out = {}
        for key, value in state.items():
            for prefix in PREFIXES:
                if key.startswith(prefix):
                    key = key[len(prefix):]
                    break
            out[key.replace(".lora_down.", ".lora_A.").replace(".lora_up.", ".lora_B.")] = value
        return out
    if any(key.startswith("lora_te") for key in state):
        raise _bad(f"{path} adapts text encoder layers (lora_te*): a training adapter adapts the denoiser only")
    from trainers.models.flow_lora import kohya_to_diffusers

    family = model.family
    targets = family.lora_targets(model.unet)
    if targets is None:
        raise _bad(f"{path} names its layers as kohya does, which {family.title} training adapters cannot: give "
                   "it in diffusers' names (transformer.<module>.lora_A.weight)")
    try:
        converted = kohya_to_diffusers(family.lora_in_own_names(state), model, targets, [None] * len(
            model.text_encoders))
    except (ValueError, KeyError) as err:
        raise _bad(f"{path} does not fit this {family.title} model: {err}") from None
    return {key.removeprefix("transformer."): value for key, value in converted.items()}


def _pairs(state: dict[str, torch.Tensor], path: Path) -> dict[str, tuple[torch.Tensor, torch.Tensor, float]]:
    """{module path: (down, up, alpha / rank)} of a state in module paths."""
    other = sorted(k for k in state if not k.endswith((".lora_A.weight", ".lora_B.weight", ".alpha")))
    if other:
        raise _bad(f"{path} holds {len(other)} tensors that are not plain LoRA weights (e.g. {other[0]}; a DoRA or "
                   "LyCORIS file?): a training adapter is a LoRA of lora_A/lora_B (or lora_down/lora_up) weights")
    pairs = {}
    for key, down in state.items():
        if not key.endswith(".lora_A.weight"):
            continue
        name = key.removesuffix(".lora_A.weight")
        up = state.get(f"{name}.lora_B.weight")
        if up is None or down.ndim != 2 or up.ndim != 2 or up.shape[1] != down.shape[0]:
            raise _bad(f"{path}: {name} has no matching lora_B (up) weight of rank {down.shape[0]}")
        alpha = state.get(f"{name}.alpha")
        rank = down.shape[0]
        scale = float(alpha) / rank if alpha is not None else 1.0
        pairs[name] = (down.float(), up.float(), scale)
    if not pairs:
        raise _bad(f"{path} holds no LoRA layers (lora_A/lora_B or lora_down/lora_up weights)")
    return pairs
