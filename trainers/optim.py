"""Optimizers and learning-rate schedules from the config."""
from __future__ import annotations

from typing import Any

import torch

from .config import TrainConfig, parse_key_values


def build_optimizer(cfg: TrainConfig, param_groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
    kwargs = parse_key_values(cfg.optimizer_args)
    name = cfg.optimizer_type
    if name == "AdamW":
        return torch.optim.AdamW(param_groups, lr=cfg.learning_rate, **kwargs)
    if name in ("AdamW8bit", "Lion8bit"):
        import bitsandbytes as bnb

        return getattr(bnb.optim, name)(param_groups, lr=cfg.learning_rate, **kwargs)
    if name == "Adafactor":
        from transformers.optimization import Adafactor

        # With an explicit learning rate Adafactor must not pick its own (kohya does the same).
        defaults = {"scale_parameter": False, "relative_step": False, "warmup_init": False}
        return Adafactor(param_groups, lr=cfg.learning_rate, **{**defaults, **kwargs})
    raise ValueError(f"optimizer_type: unknown optimizer {name!r}")


def warmup_steps(cfg: TrainConfig, total_steps: int) -> int:
    """lr_warmup_steps below 1 is a fraction of all steps; from 1 up it is a step count."""
    warmup = cfg.lr_warmup_steps
    return int(round(warmup * total_steps)) if 0 < warmup < 1 else int(warmup)


def build_lr_scheduler(cfg: TrainConfig, optimizer: torch.optim.Optimizer, total_steps: int) -> Any:
    """Stepped once per optimizer step, by us: the schedule is the same on any number of processes."""
    from diffusers.optimization import get_scheduler

    return get_scheduler(
        cfg.lr_scheduler, optimizer, num_warmup_steps=warmup_steps(cfg, total_steps),
        num_training_steps=total_steps, num_cycles=cfg.lr_scheduler_num_cycles, power=cfg.lr_scheduler_power,
    )
