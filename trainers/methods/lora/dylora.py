"""kohya's networks.dylora (DyLoRA): a LoRA whose every rank up to network_dim is usable after training.

Each step a module trains one `unit` of ranks, drawn at random, with the lower ranks fixed and the
output scaled as if the rank stopped there (sd-scripts' DyLoRAModule). The rank is drawn from a
generator seeded by (seed, step, module), so every process draws the same one; the untrained units'
gradients are dropped before the optimizer step, so it skips them (no momentum, no weight decay) as
sd-scripts' requires_grad switching does. Saved as a plain kohya LoRA at full rank.
"""
from __future__ import annotations

import math
import random

import torch
from torch import Tensor, nn

from trainers.methods.lora.network import LoRAModule, LoRANetwork
from trainers.train.method import StepHook


class DyLoRAModule(LoRAModule):
    def __init__(self, org_module: nn.Linear | nn.Conv2d, rank: int, alpha: float, unit: int) -> None:
        super().__init__(org_module, rank, alpha)
        if rank % unit:
            raise ValueError(f"DyLoRA: network_dim {rank} is not a multiple of unit {unit}")
        self.unit = unit
        self.trained = 0  # the unit trained this step

    def forward(self, x: Tensor) -> Tensor:
        out = self.org_forward(x)
        if not torch.is_autocast_enabled(x.device.type):
            x = x.to(self.lora_down.weight.dtype)
        keep = self.trained * self.unit + self.unit if self.training else self.rank
        lora_out = self.lora_up(self.lora_down(x)) * (self.multiplier * self.scale * math.sqrt(self.rank / keep))
        return out + lora_out.to(out.dtype)

    def drop_untrained_grads(self) -> None:
        """Only the trained unit's rows of down and columns of up keep their gradients."""
        start, stop = self.trained * self.unit, self.trained * self.unit + self.unit
        for weight, dim in ((self.lora_down.weight, 0), (self.lora_up.weight, 1)):
            if weight.grad is not None:
                mask = torch.zeros(weight.shape[dim], dtype=torch.bool, device=weight.device)
                mask[start:stop] = True
                shape = [1] * weight.dim()
                shape[dim] = -1
                weight.grad.mul_(mask.view(shape))


class DyLoRANetwork(LoRANetwork):
    def __init__(self, *args: object, unit: int = 1, seed: int = 0, **kwargs: object) -> None:
        self.unit = unit
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.seed = seed
        self.draw(1)

    def _make_lora(self, name: str, module: nn.Linear | nn.Conv2d) -> LoRAModule | None:
        spatial = isinstance(module, nn.Conv2d) and module.kernel_size != (1, 1)
        if spatial and not self.conv_dim:
            return None
        return DyLoRAModule(module, self.network_dim, self.network_alpha, self.unit)

    def draw(self, step: int) -> None:
        """Pick each module's trained unit for optimizer step `step` (the same on every process)."""
        rng = random.Random(f"{self.seed}:{step}")
        for _, lora in self.named_modules_for_kohya():
            lora.trained = rng.randrange(lora.rank // self.unit)  # type: ignore[union-attr]


class DyLoRAUnits(StepHook):
    """Keeps the dropped gradients and the next step's draw in step with the optimizer."""

    def __init__(self, network: DyLoRANetwork) -> None:
        self.network = network

    def after_backward(self) -> None:
        for _, lora in self.network.named_modules_for_kohya():
            lora.drop_untrained_grads()  # type: ignore[union-attr]

    def after_step(self, step: int) -> None:
        self.network.draw(step + 1)



