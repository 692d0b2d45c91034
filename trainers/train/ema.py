"""Exponential moving average of the trained weights (dreambooth, finetune).

`shadow = d * shadow + (1 - d) * weight`, applied every `update_every` optimizer steps with
`d = decay ** update_every`, so the averaging horizon in steps does not depend on how often it
runs. The copy is float32 and lives on the GPU ("gpu": fast, costs GPU memory) or in CPU memory
("cpu": costs a copy over the bus per update).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import ContextManager

import torch
from torch import nn

from trainers.train.method import StepHook


class EMA(StepHook):
    """`for_sampling`: sample images are made with the averaged weights."""

    def __init__(self, modules: dict[str, nn.Module], decay: float, update_every: int = 1,
                 place: str = "gpu", for_sampling: bool = False) -> None:
        if not 0 <= decay <= 1:
            raise ValueError(f"ema_decay must be in [0, 1], got {decay}")
        self.modules = modules
        self.decay = decay
        self.update_every = max(1, int(update_every))
        self.place = place
        self.for_sampling = for_sampling
        self.shadow: dict[str, dict[str, torch.Tensor]] = {
            name: {k: self._copy(p) for k, p in module.named_parameters() if p.requires_grad}
            for name, module in modules.items()}

    def _copy(self, p: torch.Tensor) -> torch.Tensor:
        device = "cpu" if self.place == "cpu" else p.device
        return p.detach().to(device, torch.float32, copy=True)

    @torch.no_grad()
    def update(self, step: int) -> bool:
        """After the optimizer step `step` (1-based); returns whether this step updated the average."""
        if step % self.update_every:
            return False
        d = self.decay ** self.update_every
        for name, module in self.modules.items():
            shadow = self.shadow[name]
            for k, p in module.named_parameters():
                if k in shadow:
                    s = shadow[k]
                    s.mul_(d).add_(p.detach().to(s.device, torch.float32), alpha=1 - d)
        return True

    def after_step(self, step: int) -> None:
        self.update(step)

    def state(self) -> dict[str, torch.Tensor]:
        return self.state_tensors()

    def restore(self, tensors: dict[str, torch.Tensor], step: int) -> None:
        self.load_state_tensors(tensors)

    def sampling_weights(self) -> ContextManager[None]:
        return self.applied() if self.for_sampling else contextlib.nullcontext()

    def state_dict(self, name: str) -> dict[str, torch.Tensor]:
        """The module's full state dict with the averaged weights in place of the trained ones."""
        state = dict(self.modules[name].state_dict())
        for k, v in self.shadow[name].items():
            state[k] = v
        return state

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The averages, for a training state: '<module>.<weight name>' -> tensor."""
        return {f"{name}.{k}": v for name, shadow in self.shadow.items() for k, v in shadow.items()}

    @torch.no_grad()
    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        """Put back averages of `state_tensors`; without them (EMA newly turned on) start from the current weights."""
        for name, module in self.modules.items():
            params = dict(module.named_parameters())
            for k, s in self.shadow[name].items():
                saved = tensors.get(f"{name}.{k}")
                s.copy_(saved if saved is not None and saved.shape == s.shape else params[k].detach())

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """The averaged weights swapped into the modules for the block (e.g. sample images), then restored."""
        saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        try:
            with torch.no_grad():
                for name, module in self.modules.items():
                    for k, p in module.named_parameters():
                        if k in self.shadow[name]:
                            saved.append((p, p.detach().to("cpu" if self.place == "cpu" else p.device, copy=True)))
                            p.copy_(self.shadow[name][k].to(p.device, p.dtype))
            yield
        finally:
            with torch.no_grad():
                for param, original in saved:
                    param.copy_(original)
