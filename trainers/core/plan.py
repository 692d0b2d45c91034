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
    keep_global_batch: bool = False  # train_batch_size was the global batch, split over the processes

    def describe(self) -> str:
        """The batch arithmetic in words, e.g. 'batch 2 x 4 processes x 1 accumulation = global batch 8'."""
        procs = f"{self.num_processes} process{'es' if self.num_processes != 1 else ''}"
        kept = " (kept fixed: keep_global_batch)" if self.keep_global_batch else ""
        return (f"per-device batch {self.per_device_batch} x {procs} x accumulation "
                f"{self.gradient_accumulation_steps} = global batch {self.global_batch}{kept}")


class BatchSplitError(ValueError):
    """A global batch that does not split evenly over the processes."""


def per_device_batch(batch_size: int, num_processes: int, keep_global_batch: bool) -> int:
    """The batch each process trains: `batch_size` itself, or its share of it with keep_global_batch."""
    if not keep_global_batch:
        return batch_size
    if batch_size % num_processes:
        lower = max(num_processes, batch_size // num_processes * num_processes)
        raise BatchSplitError(f"is {batch_size} but keep_global_batch splits it over {num_processes} processes: use "
                              f"a multiple of {num_processes} (e.g. {lower} or {lower + num_processes}), or turn "
                              "keep_global_batch off")
    return batch_size // num_processes


def plan_steps(samples_per_epoch: int, per_device_batch: int, num_processes: int, accumulation: int,
               max_epochs: int | None, max_steps: int | None, batches_per_epoch: int | None = None,
               keep_global_batch: bool = False) -> StepPlan:
    """images x repeats x epochs / (batch x processes x accumulation) = steps; epochs win over steps.

    `per_device_batch`: what each process trains a step (see `per_device_batch()` for keep_global_batch).
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
                    per_device_batch * num_processes * accumulation, steps_per_epoch, epochs, total,
                    keep_global_batch)
