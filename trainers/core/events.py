"""The run directory's event stream (events.jsonl), status.json, and the progress meter.

Only rank 0 writes. Each event is one JSON object a line with at least `type` and `time`.
Types: start, progress, checkpoint, sample, warning, error, done; also `dataset` (the preflight report of the
data the run trains on: folders, buckets, skipped files, steps), `cache` (what, done, total) while
latents or text-encoder outputs are cached, `resume` (the state a run continues from), `class_images` and
`info` (dreambooth). Generation jobs write start, image, generate_progress, grid, warning, error, done.
"""
from __future__ import annotations

import json
import math
import os
import resource
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from trainers.core.fsio import atomic_write_text
from trainers.core.secrets import redact


class EventLog:
    def __init__(self, run_dir: Path | None, enabled: bool = True) -> None:
        self.enabled = enabled and run_dir is not None
        self.path = Path(run_dir) / "events.jsonl" if run_dir is not None else None
        if self.enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def emit(self, type: str, **fields: Any) -> None:
        if not self.enabled:
            return
        line = json.dumps(redact({"type": type, "time": round(time.time(), 3), **fields}), ensure_ascii=False)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def warning(self, message: str) -> None:
        self.emit("warning", message=message)


def update_status(run_dir: Path | None, **fields: Any) -> None:
    """Merge `fields` into status.json (atomically: readers never see half a file).

    The GUI and the trainer both update it; a lock on status.lock keeps one's update from
    erasing the other's (read-modify-write).
    """
    if run_dir is None:
        return
    path = Path(run_dir) / "status.json"
    with _locked(path.with_name("status.lock")):
        try:
            status = json.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            status = {}
        status.update(redact(fields), updated=time.time())
        atomic_write_text(path, json.dumps(status, indent=1, ensure_ascii=False))


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """An exclusive advisory lock (POSIX); elsewhere, no lock."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(lock_path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def peak_memory_gb() -> tuple[float, str]:
    """Peak accelerator memory when there is one, else the process's peak resident memory."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**30, "cuda"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "host"


class ProgressMeter:
    """Turns step timings and losses into progress events.

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

    def update(self, step: int, epoch: int, total_epochs: int, loss: float, lr: float,
               data_wait_s: float = 0.0) -> dict[str, Any]:
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
        return {
            "step": step,
            "total_steps": self.total_steps,
            "epoch": epoch,
            "total_epochs": total_epochs,
            "loss": loss,
            "loss_smoothed": self._ema / self._ema_weight if self._ema_weight else loss,
            "lr": lr,
            "it_per_s": round(it_per_s, 4),
            "images_per_s": round(it_per_s * self.images_per_step, 4),
            "eta_s": round(remaining / it_per_s, 1) if it_per_s > 0 else None,
            "data_share": round(sum(self.data_waits) / elapsed, 4) if elapsed > 0 else 0.0,
            "peak_mem_gb": round(memory, 3),
            "peak_mem_kind": memory_kind,
        }


def process_info() -> dict[str, Any]:
    return {"trainer_pid": os.getpid(), "pgid": os.getpgid(0)}
