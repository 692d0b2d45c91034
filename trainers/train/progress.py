"""The progress meter: step timings and losses turned into progress records (rates over a recent window)."""
from __future__ import annotations

import math
import resource
import time
from collections import deque

import torch

from trainers.core.events import Progress


def peak_memory_gb() -> tuple[float, str]:
    """Peak accelerator memory when there is one, else the process's peak resident memory."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**30, "cuda"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "host"


class ProgressMeter:
    """Turns step timings and losses into progress records.

    Rates are wall-clock over the last `window` steps (not a whole-run average), so they
    follow slowdowns and are not dragged down by the first, slow steps.
    """

    def __init__(self, total_steps: int, images_per_step: int, window: int = 20, smoothing: float = 0.95) -> None:
        self.total_steps = total_steps
        self.images_per_step = images_per_step
        self.times: deque[float] = deque(maxlen=window + 1)
        self.data_waits: deque[float] = deque(maxlen=window)
        self.smoothing = smoothing
        self._ema = 0.0
        self._ema_weight = 0.0

    def start(self) -> None:
        self.times.clear()
        self.times.append(time.perf_counter())

    def exclude(self, seconds: float) -> None:
        """Leave `seconds` of work between steps (a sample, a save) out of the rates: shift the window by it."""
        self.times = deque((t + seconds for t in self.times), maxlen=self.times.maxlen)

    @property
    def smoothed_loss(self) -> float | None:
        """The training loss's moving average so far (None before the first finite loss)."""
        return self._ema / self._ema_weight if self._ema_weight else None

    def update(self, step: int, epoch: int, total_epochs: int, loss: float, lr: float,
               data_wait_s: float = 0.0) -> Progress:
        """`data_wait_s`: time this step spent waiting for its batch (reported as a share of step time)."""
        self.times.append(time.perf_counter())
        self.data_waits.append(data_wait_s)
        if math.isfinite(loss):
            self._ema = self.smoothing * self._ema + (1 - self.smoothing) * loss
            self._ema_weight = self.smoothing * self._ema_weight + (1 - self.smoothing)
        elapsed = self.times[-1] - self.times[0]
        it_per_s = (len(self.times) - 1) / elapsed if elapsed > 0 else 0.0
        memory, memory_kind = peak_memory_gb()
        remaining = self.total_steps - step
        return Progress(
            step=step, total_steps=self.total_steps, epoch=epoch, total_epochs=total_epochs, loss=loss,
            loss_smoothed=self._ema / self._ema_weight if self._ema_weight else loss, lr=lr,
            it_per_s=round(it_per_s, 4), images_per_s=round(it_per_s * self.images_per_step, 4),
            eta_s=round(remaining / it_per_s, 1) if it_per_s > 0 else None,
            data_share=round(sum(self.data_waits) / elapsed, 4) if elapsed > 0 else 0.0,
            peak_mem_gb=round(memory, 3), peak_mem_kind=memory_kind)
