"""Optimizers and learning-rate schedules from the config."""
from __future__ import annotations

from typing import Any

import torch

from trainers.core.options import TrainConfig, parse_key_values


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


def warmup_steps(cfg: TrainConfig, total_steps: int, num_processes: int = 1) -> int:
    """lr_warmup_steps below 1 is a fraction of all steps; from 1 up it is a step count.

    A count is in steps of a one-process run: when epochs set the length, P processes take 1/P of the
    steps, so the warmup takes 1/P of its steps too and ends at the same share of training (and of
    images seen). With max_train_steps or keep_global_batch the steps are the same on any P.
    """
    warmup = cfg.lr_warmup_steps
    if 0 < warmup < 1:
        return int(round(warmup * total_steps))
    if cfg.max_train_epochs and not cfg.keep_global_batch and num_processes > 1:
        return min(total_steps, max(1, int(round(warmup / num_processes)))) if warmup else 0
    return int(warmup)


def build_lr_scheduler(cfg: TrainConfig, optimizer: torch.optim.Optimizer, total_steps: int,
                       num_processes: int = 1) -> Any:
    """Stepped once per optimizer step, by us: the same share of training on any number of processes."""
    from diffusers.optimization import get_scheduler

    return get_scheduler(
        cfg.lr_scheduler, optimizer, num_warmup_steps=warmup_steps(cfg, total_steps, num_processes),
        num_training_steps=total_steps, num_cycles=cfg.lr_scheduler_num_cycles, power=cfg.lr_scheduler_power,
    )
