"""Weights of a diffusers transformer in the layout of its family's reference code (Black Forest Labs' FLUX,
Stability's MMDiT), the layout of the single files sd-scripts, ComfyUI and Forge read.

A family lists Rules: each reference tensor and the diffusers tensors it holds. Both directions come from the same
list: fused layers (q, k and v; FLUX's MLP input too) are the diffusers layers stacked by rows, and some
modulations keep their (shift, scale) halves in the other order.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from trainers.models.base import ModelLoadError


@dataclass(frozen=True)
class Rule:
    reference: str  # a reference tensor name
    parts: tuple[str, ...]  # the diffusers tensors it holds, stacked by rows in this order
    swap_halves: bool = False  # (shift, scale) in the reference, (scale, shift) in diffusers


def linear(reference: str, *parts: str, swap_halves: bool = False) -> Iterator[Rule]:
    """The weight and bias of a reference layer holding `parts` (diffusers layers)."""
    for param in ("weight", "bias"):
        yield Rule(f"{reference}.{param}", tuple(f"{p}.{param}" for p in parts), swap_halves)


def prefix_of(keys: Mapping[str, object], prefixes: tuple[str, ...], marker: str) -> str:
    """Where a file nests the denoiser: the first of `prefixes` under which `marker` is found ("" when none)."""
    return next((prefix for prefix in prefixes if any(k.startswith(prefix + marker) for k in keys)), "")


def strip_prefix(state: Mapping[str, object], prefixes: tuple[str, ...], marker: str) -> dict[str, object]:
    """The denoiser's own tensors of a file, its nesting (prefix_of) removed."""
    prefix = prefix_of(state, prefixes, marker)
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def to_diffusers(state: Mapping[str, torch.Tensor], rules: list[Rule], width: int, name: str
                 ) -> dict[str, torch.Tensor]:
    """Reference tensors -> the diffusers state dict. A fused tensor is split into parts `width` rows each, the
    last taking the rest (FLUX's MLP input)."""
    out: dict[str, torch.Tensor] = {}
    for rule in rules:
        if rule.reference not in state:
            raise ModelLoadError(f"{name}: the transformer has no {rule.reference}: is the file complete?")
        tensor = state[rule.reference]
        if rule.swap_halves:
            tensor = torch.cat(tensor.chunk(2, dim=0)[::-1])
        sizes = [width] * (len(rule.parts) - 1)
        pieces = tensor.split(sizes + [tensor.shape[0] - sum(sizes)]) if len(rule.parts) > 1 else (tensor,)
        out.update(zip(rule.parts, pieces))
    return out


def to_reference(state: Mapping[str, torch.Tensor], rules: list[Rule]) -> dict[str, torch.Tensor]:
    """The diffusers state dict -> reference tensors."""
    out: dict[str, torch.Tensor] = {}
    for rule in rules:
        tensor = torch.cat([state[p] for p in rule.parts]) if len(rule.parts) > 1 else state[rule.parts[0]]
        out[rule.reference] = torch.cat(tensor.chunk(2, dim=0)[::-1]) if rule.swap_halves else tensor
    return out


def shapes_of(shapes: Mapping[str, tuple[int, ...]], names: tuple[str, ...], file: str,
              title: str) -> list[tuple[int, ...]]:
    """The shapes of the tensors `names` of a single file (`file`) holding a `title` transformer; a missing one
    named."""
    try:
        return [shapes[name] for name in names]
    except KeyError as err:
        raise ModelLoadError(f"{file}: the {title} transformer has no {err.args[0]}: is the file complete?") from None


def count(keys: object, prefix: str) -> int:
    """How many numbered blocks `<prefix><n>.` the keys have."""
    found = {int(k[len(prefix):].split(".")[0]) for k in keys if k.startswith(prefix)}  # type: ignore[attr-defined]
    return max(found) + 1 if found else 0


def head_width(config: Mapping[str, Any]) -> int:
    """The transformer's width: its attention heads times their width (how wide each part of a fused q, k, v is)."""
    return int(config["attention_head_dim"] * config["num_attention_heads"])


@dataclass(frozen=True)
class Layout:
    """A family's reference layout as its `reference` module offers it: where its files nest the denoiser (under
    one of `prefixes`, found by `marker`) and its rules for a transformer config (`rules_of`), fused tensors split
    `width(config)` rows a part; `unused`: tensors the reference holds and its forward never reads (NextDiT's
    final norm), which diffusers drops: left out on the way in, written as an identity norm `width(config)` wide
    on the way out, so that strict loaders find every tensor. A family's module binds `strip_prefix`,
    `to_diffusers` and `to_reference` to it and writes its own only where its layout needs more (grouped heads)."""

    prefixes: tuple[str, ...]
    marker: str
    rules_of: Callable[[Mapping[str, Any]], list[Rule]]
    width: Callable[[Mapping[str, Any]], int] = head_width
    unused: tuple[str, ...] = ()

    def strip_prefix(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """The transformer's own tensors of a file (the nesting of all-in-one checkpoints removed)."""
        return strip_prefix(state, self.prefixes, self.marker)

    def to_diffusers(self, state: Mapping[str, torch.Tensor], config: Mapping[str, Any], name: str,
                     skip: Sequence[Rule] = ()) -> dict[str, torch.Tensor]:
        """Reference-layout tensors -> the diffusers transformer's state dict; `skip`: rules the caller converts
        itself (Lumina 2's q, k and v of grouped heads)."""
        used = {k: v for k, v in state.items() if k not in self.unused}
        rules = [rule for rule in self.rules_of(config) if rule not in skip]
        return to_diffusers(used, rules, self.width(config), name)

    def to_reference(self, state: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """The diffusers transformer's state dict -> reference-layout tensors (what the family's single files hold)."""
        rules = self.rules_of(config)
        out = to_reference(state, rules)
        like = state[rules[0].parts[0]]
        out.update({name: torch.ones(self.width(config), dtype=like.dtype, device=like.device) for name in self.unused})
        return out
