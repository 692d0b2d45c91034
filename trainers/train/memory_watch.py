"""A run's memory against its estimate, and the spill guard.

status.json gets `memory_estimate_gb` when the run starts and `memory_peak_gb` (with `memory_peak_kind`) after its
first step and when it ends, so the run panel shows estimate vs real: on a GPU the peak torch.cuda.max_memory_allocated
saw, on the CPU the peak resident memory (from the first step on) above what the process held before the model loaded.

The spill guard: on a GPU whose free memory is near zero, a step much slower than the steps before means the driver
is paging memory to system RAM (Windows' shared GPU memory) or the allocator is thrashing; the page is told so once,
with the options that lower the need. A slow step while the driver's shared memory use has grown since the run began
says the same: on Windows (WDDM) the driver lends system RAM to a full card, which torch then counts as free card
memory. nvidia-smi has no field for it; Windows' "GPU Adapter Memory" performance counter (what Task Manager shows as
"Shared GPU memory") has. On Linux there is no such thing: the CUDA driver never pages a card's memory to system RAM
(an allocation over the card fails with out-of-memory), so the reader there is None.
"""
from __future__ import annotations

import resource
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from trainers.memory_estimate import estimate_memory
from trainers.core.options import TrainConfig
from trainers.core.options.typed import PrecisionOptions
from trainers.core.rundir import update_status
from trainers.core.weights_memory import GB

GIB = 2**30  # what nvidia-smi and the driver count a card in
SLOWER = 2.0  # a step this many times the recent median
NEAR_FULL = 0.03  # with less than this share of the card free
SHARED_GROWTH = 256 * 2**20  # shared GPU memory in use beyond what it was when the run began
MemoryReader = Callable[[], tuple[int, int]]  # (free, total) bytes on the device
SharedReader = Callable[[], int | None]  # bytes of system RAM the driver lends the GPUs now; None: cannot tell
_SHARED_COUNTER = r"\GPU Adapter Memory(*)\Shared Usage"


def shared_memory_reader() -> SharedReader | None:
    """The driver's shared GPU memory use where the platform has it (Windows, WDDM); None elsewhere (Linux: the
    CUDA driver does not spill to system RAM)."""
    if sys.platform != "win32" or shutil.which("typeperf") is None:
        return None
    return read_windows_shared


def read_windows_shared() -> int | None:
    """The shared GPU memory in use over every adapter, in bytes, from one typeperf sample; None when unreadable."""
    try:
        listed = subprocess.run(["typeperf", _SHARED_COUNTER, "-sc", "1"], capture_output=True, text=True,
                                timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_typeperf(listed)


def parse_typeperf(listed: str) -> int | None:
    """The sum of a typeperf CSV sample's values (its last quoted row: time, then one value per adapter)."""
    rows = [line for line in listed.splitlines() if line.startswith('"')]
    if len(rows) < 2:
        return None
    try:
        return int(sum(float(cell.strip('"')) for cell in rows[-1].split(",")[1:] if cell.strip('" ')))
    except ValueError:
        return None


def resident_bytes() -> int:
    """This process's resident memory now."""
    import psutil

    return psutil.Process().memory_info().rss


def peak_resident_bytes() -> int:
    """This process's peak resident memory since the last `restart_resident_peak` (Linux), else since it started."""
    try:
        status = Path("/proc/self/status").read_text(encoding="utf-8")
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) * 1024
    except (OSError, StopIteration, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def restart_resident_peak() -> None:
    """Count the peak resident memory from now (Linux): loading a model briefly holds its file's pages beside the
    weights, which a run's steps never do again."""
    try:
        Path("/proc/self/clear_refs").write_text("5", encoding="utf-8")
    except OSError:
        pass


class SpillGuard:
    """Says once when a step's time jumps while the device's free memory is near zero."""

    def __init__(self, cfg: TrainConfig, read: MemoryReader | None, window: int = 10,
                 read_shared: SharedReader | None = None) -> None:
        self.cfg, self.read, self.read_shared = cfg, read, read_shared
        self.recent: deque[float] = deque(maxlen=window)
        self.warned = False
        self.shared_at_start = read_shared() if read_shared is not None else None

    def step(self, seconds: float) -> str | None:
        """The warning for a step that took `seconds`, or None."""
        message = None
        if self.read is not None and not self.warned and len(self.recent) >= 3:
            usual = statistics.median(self.recent)
            if seconds > SLOWER * usual and (state := self._spilling()):
                self.warned = True
                message = (f"the run is spilling out of GPU memory: a step took {seconds:.2f} s (usually "
                           f"{usual:.2f} s) with {state}. {self.advice()}")
        self.recent.append(seconds)
        return message

    def _spilling(self) -> str | None:
        """What says the card is full: its free memory near zero, or the driver's shared memory grown."""
        free, total = self.read()  # type: ignore[misc]
        if free < NEAR_FULL * total:
            return f"{free / GIB:.2f} of {total / GIB:.0f} GiB free"
        shared = self.read_shared() if self.read_shared is not None else None
        if shared is not None and self.shared_at_start is not None and shared - self.shared_at_start > SHARED_GROWTH:
            return (f"{(shared - self.shared_at_start) / GIB:.2f} GiB more of system RAM lent to the GPU as shared "
                    "memory than when the run began")
        return None

    def advice(self) -> str:
        values = self.cfg.values
        steps = []
        if str(values.get("base_model_precision") or "none") == "none" and not values.get("fp8_base"):
            steps.append("base_model_precision = 'int8' (or 'nf4')")
        if not values.get("layer_offload_fraction") and not values.get("blocks_to_swap"):
            steps.append("layer_offload_fraction = 0.5")
        if not PrecisionOptions.of(self.cfg).gradient_checkpointing:
            steps.append("gradient_checkpointing = true")
        if int(values.get("train_batch_size") or 1) > 1:
            steps.append("a smaller train_batch_size (with gradient_accumulation_steps to keep the batch)")
        steps.append("a lower resolution")
        return "Lower its memory: set " + ", or ".join(steps) + "; Validate's estimate shows what each saves."


class MemoryWatch:
    """Writes the estimate and the measured peak into the run's status; runs the spill guard on a GPU."""

    def __init__(self, cfg: TrainConfig, run_dir: Any, device: torch.device, resident_before_model: int,
                 read: MemoryReader | None = None) -> None:
        self.run_dir, self.device, self.before = run_dir, device, resident_before_model
        on_gpu = device.type == "cuda"
        estimate = estimate_memory(cfg, on_gpu=on_gpu)
        if read is None and on_gpu:
            read = lambda: torch.cuda.mem_get_info(device)  # noqa: E731 - (free, total)
        self.guard = SpillGuard(cfg, read, read_shared=shared_memory_reader() if on_gpu else None)
        restart_resident_peak()
        if estimate is not None:
            # on a GPU the measured peak (max_memory_allocated since the start) spans the caption pass too
            peak = max(estimate.gpu_gb, estimate.caching) if on_gpu else estimate.host_gb
            update_status(run_dir, memory_estimate_gb=round(peak, 3),
                          memory_estimate=estimate.to_dict())

    def peak_gb(self) -> tuple[float, str]:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / GB, "cuda"
        return max(0, peak_resident_bytes() - self.before) / GB, "host, above the process before the model"

    def record(self) -> None:
        peak, kind = self.peak_gb()
        update_status(self.run_dir, memory_peak_gb=round(peak, 3), memory_peak_kind=kind)
