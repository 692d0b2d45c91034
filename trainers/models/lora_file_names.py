"""LoRA files in the naming that both diffusers' load_lora_weights and ComfyUI read, for families whose kohya names
one of them drops (diffusers converts Lumina 2's and Krea 2's reference names only from `diffusion_model.` keys with
PEFT's lora_A/lora_B and no alpha; ComfyUI maps Qwen-Image 2.1's fused MLP halves only under dotted names).

Training works in kohya's names (`lora_unet_` + the module path with dots as underscores, LoraTarget.name); a file
names each module by that path (LoraTarget.path). Reading turns either naming back into kohya's, so files written
before keep loading.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import torch

from trainers.models.base import LoraTarget

KOHYA_PREFIX = "lora_unet_"
PEFT = {"lora_A.weight": "lora_down.weight", "lora_B.weight": "lora_up.weight"}
KOHYA = ("lora_down.weight", "lora_up.weight", "alpha")


def to_file_names(state: dict[str, torch.Tensor], targets: Sequence[LoraTarget], prefix: str,
                  peft: bool) -> dict[str, torch.Tensor]:
    """`state` (kohya names) with each target's module as `<prefix><path>`: with kohya's weight names and alpha, or
    (`peft`) as lora_A/lora_B with alpha / rank folded into lora_A, as diffusers and ComfyUI read a file without
    alphas. Modules of other kinds (LyCORIS) and targets without a path keep their names."""
    paths = {target.name: target.path for target in targets if target.path}
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        module, _, weight = key.partition(".")
        if module not in paths or f"{module}.lora_down.weight" not in state:
            out[key] = value
            continue
        name = prefix + paths[module]
        if not peft:
            out[f"{name}.{weight}"] = value
        elif weight == "lora_down.weight":
            alpha = state.get(f"{module}.alpha")
            scale = (float(alpha) if alpha is not None else value.shape[0]) / value.shape[0]
            out[f"{name}.lora_A.weight"] = (value.float() * scale).to(value.dtype)
        elif weight == "lora_up.weight":
            out[f"{name}.lora_B.weight"] = value
        elif weight != "alpha":
            raise ValueError(f"{key}: a LoRA module holds no {weight} in a file with lora_A/lora_B")
    return out


def from_file_names(state: dict[str, torch.Tensor], prefix: str,
                    network_alpha: float | None = None) -> dict[str, torch.Tensor]:
    """A file of to_file_names (or kohya's names: returned as it is) in kohya's names. A module saved without its
    alpha (its scale is in its lora_A) gets `network_alpha` (the run's, so that network_weights takes the file) and
    lora_A less that scale: the same update with any alpha; without one, alpha = rank."""
    if not any(key.startswith(prefix) for key in state) or any(key.startswith(KOHYA_PREFIX) for key in state):
        return state
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        weight = next((w for w in (*PEFT, *KOHYA) if key.endswith("." + w)), None)
        if not key.startswith(prefix) or weight is None:
            out[key] = value
            continue
        module = key.removesuffix("." + weight)
        name = KOHYA_PREFIX + module.removeprefix(prefix).replace(".", "_")
        out[f"{name}.{PEFT.get(weight, weight)}"] = value
        if weight == "lora_A.weight" and f"{module}.alpha" not in state:
            rank = value.shape[0]
            alpha = network_alpha or float(rank)
            out[f"{name}.lora_down.weight"] = (value.float() * (rank / alpha)).to(value.dtype)
            out[f"{name}.alpha"] = torch.tensor(alpha)
    return out


def file_paths(keys: Iterable[str], prefix: str, modules: re.Pattern[str]) -> dict[str, str] | None:
    """kohya module name -> module path of a file of to_file_names: every key `<prefix><path>.<weight>` with a path
    `modules` matches in full; None for any other file."""
    paths: dict[str, str] = {}
    for key in keys:
        weight = next((w for w in (*PEFT, *KOHYA) if key.endswith("." + w)), None)
        path = key.removesuffix("." + weight).removeprefix(prefix) if weight and key.startswith(prefix) else None
        if path is None or not modules.fullmatch(path):
            return None
        paths[KOHYA_PREFIX + path.replace(".", "_")] = path
    return paths or None


def path_target(path: str, layers: tuple[torch.nn.Linear, ...]) -> LoraTarget:
    """The LoRA module of `layers` named by its dotted module path (kohya's name: lora_unet_ + path with _)."""
    return LoraTarget(KOHYA_PREFIX + path.replace(".", "_"), layers, path=path)


class FileNamedLora:
    """A family mix-in: its LoRA files name lora_targets' modules `<lora_file_prefix><path>`, as lora_A/lora_B with
    the alpha folded in (`lora_file_peft`) or with kohya's weight names."""

    lora_file_prefix = "diffusion_model."
    lora_file_peft = True
    lora_file_modules: re.Pattern[str]  # the module paths lora_targets gives (tools tell a file's family by them)

    @property
    def lora_file_naming(self) -> str:
        weights = "lora_A/lora_B, the alpha folded into lora_A" if self.lora_file_peft else "lora_down/lora_up/alpha"
        return f"`{self.lora_file_prefix}<module path>` with {weights}"

    def lora_file_paths(self, keys: Iterable[str]) -> dict[str, str] | None:
        return file_paths(keys, self.lora_file_prefix, self.lora_file_modules)

    def lora_file_at_paths(self, state: dict[str, torch.Tensor], paths: Mapping[str, str]) -> dict[str, torch.Tensor]:
        targets = [SimpleNamespace(name=name, path=path) for name, path in paths.items()]
        return to_file_names(state, targets, self.lora_file_prefix, self.lora_file_peft)  # type: ignore[arg-type]

    def lora_file(self, state: dict[str, torch.Tensor], model: Any) -> dict[str, torch.Tensor]:
        return to_file_names(state, self.lora_targets(model.unet), self.lora_file_prefix,  # type: ignore[attr-defined]
                             self.lora_file_peft)

    def lora_in_own_names(self, state: dict[str, torch.Tensor],
                          network_alpha: float | None = None) -> dict[str, torch.Tensor]:
        return from_file_names(state, self.lora_file_prefix, network_alpha)
