"""The step plan: how many optimizer steps an epoch and a run take. Torch-free (the GUI calls it)."""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class StepPlan:
    samples_per_epoch: int
    per_device_batch: int
    num_processes: int
    gradient_accumulation_steps: int
    global_batch: int
    steps_per_epoch: int
    epochs: int
    total_steps: int


def plan_steps(samples_per_epoch: int, per_device_batch: int, num_processes: int, accumulation: int,
               max_epochs: int | None, max_steps: int | None, batches_per_epoch: int | None = None) -> StepPlan:
    """images x repeats x epochs / (batch x processes x accumulation) = steps; epochs win over steps.

    `batches_per_epoch`: the batches each process runs an epoch when the data loader knows better
    than the plain division (aspect-ratio buckets end in partial batches, one bucket at a time).
    """
    if batches_per_epoch is None:
        batches_per_epoch = math.ceil(samples_per_epoch / (per_device_batch * num_processes))
    steps_per_epoch = max(1, math.ceil(batches_per_epoch / accumulation))
    if max_epochs:
        epochs, total = max_epochs, max_epochs * steps_per_epoch
    elif max_steps:
        epochs, total = math.ceil(max_steps / steps_per_epoch), max_steps
    else:
        raise ValueError("set max_train_epochs or max_train_steps")
    return StepPlan(samples_per_epoch, per_device_batch, num_processes, accumulation,
                    per_device_batch * num_processes * accumulation, steps_per_epoch, epochs, total)
