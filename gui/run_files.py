"""Reading run directories: everything the page shows about a run comes from these files.

Files are tailed with byte cursors (never re-read whole), and one RunWatcher per run is
shared by every browser session, so a refresh or a second browser costs nothing extra.
"""
from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainers.core.processes import pid_alive

ACTIVE_STATES = ("starting", "running", "stopping")
MAX_CHART_POINTS = 400
MAX_KEPT_POINTS = 20_000
PROGRESS_PREFIX = '{"type": "progress"'  # how EventLog starts a progress line
LOG_LINES = 200


class Tail:
    """Incremental reader of a growing text file; returns complete new lines only."""

    def __init__(self, path: Path, start_from_end_bytes: int | None = None) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""
        self._start_from_end = start_from_end_bytes

    def read_new(self, max_bytes: int = 64 << 20) -> list[str]:
        try:
            with open(self.path, "rb") as fh:
                if self._start_from_end is not None:  # first read of a long log: only its end
                    size = fh.seek(0, os.SEEK_END)
                    self.offset = max(0, size - self._start_from_end)
                    self._start_from_end = None
                fh.seek(self.offset)
                chunk = fh.read(max_bytes)
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        data = self._partial + chunk
        end = data.rfind(b"\n") + 1  # complete lines end here; the rest waits for its newline
        self._partial = data[end:]
        if not end:
            return []
        return [line.rstrip("\r") for line in data[:end].decode("utf-8", "replace").split("\n")[:-1]]


def read_status(run_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((run_dir / "status.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def effective_state(status: dict[str, Any]) -> str:
    """The state, corrected for a process that died without saying so (SIGKILL, OOM killer)."""
    state = status.get("state", "unknown")
    if state in ACTIVE_STATES and not pid_alive(status.get("launcher_pid") or status.get("trainer_pid")):
        return "failed"
    return state


@dataclass
class RunView:
    """What the run panel shows, built from the run's files."""

    run_id: str
    state: str = "unknown"
    status: dict[str, Any] = field(default_factory=dict)
    progress: dict[str, Any] = field(default_factory=dict)
    rank_step_s: list[float] = field(default_factory=list)  # each process's own seconds a step (multi-GPU runs)
    plan: dict[str, Any] = field(default_factory=dict)
    losses: list[tuple[int, float, float]] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: dict[str, Any] = field(default_factory=dict)
    output: str = ""
    log_tail: list[str] = field(default_factory=list)


class RunWatcher:
    """Follows one run directory; `refresh()` reads only what was appended since last time."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.events = Tail(run_dir / "events.jsonl")
        self.log = Tail(run_dir / "train.log", start_from_end_bytes=64 << 10)
        self.view = RunView(run_dir.name)
        self._log_lines: deque[str] = deque(maxlen=LOG_LINES)
        self._losses: list[tuple[int, float, float]] = []
        self._lock = threading.Lock()

    def refresh(self) -> RunView:
        with self._lock:
            lines = self.events.read_new()
            progress = [i for i, line in enumerate(lines) if line.startswith(PROGRESS_PREFIX)]
            stride = len(progress) // MAX_KEPT_POINTS + 1  # a long backlog: parse a sample of its progress
            skip = set(progress[::1]) - set(progress[::stride]) - {progress[-1]} if stride > 1 else set()
            for i, line in enumerate(lines):
                if i not in skip:
                    self._apply(line)
            # progress bars redraw with \r: keep what the terminal would show last
            self._log_lines.extend(line.rstrip("\r").split("\r")[-1] for line in self.log.read_new())
            v = self.view
            v.status = read_status(self.run_dir)
            v.state = effective_state(v.status)
            if v.state == "failed" and not v.error and v.status.get("state") in ACTIVE_STATES:
                v.error = {"message": "the trainer process ended without reporting (killed by the system: likely "
                                      "out of system memory, or stopped from outside)"}
            v.log_tail = list(self._log_lines)
            v.losses = _downsample(self._losses, MAX_CHART_POINTS)
            return v

    def _apply(self, line: str) -> None:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            return
        kind, v = event.get("type"), self.view
        if kind == "progress":
            v.progress = event
            v.rank_step_s = event.get("rank_step_s", v.rank_step_s)  # sent every few steps only
            self._losses.append((event["step"], event["loss"], event["loss_smoothed"]))
            if len(self._losses) > MAX_KEPT_POINTS:  # keep memory bounded on very long runs
                self._losses = self._losses[::2]
        elif kind == "start":
            v.plan = event.get("plan", {})
        elif kind == "checkpoint":
            v.checkpoints.append(event["path"])
        elif kind == "sample":
            v.samples.append(event["path"])
        elif kind == "warning":
            v.warnings.append(event.get("message", ""))
        elif kind == "error":
            v.error = event
        elif kind == "done":
            v.output = event.get("output", "")


def _downsample(points: list, limit: int) -> list:
    if len(points) <= limit:
        return list(points)
    stride = len(points) / limit
    return [points[int(i * stride)] for i in range(limit - 1)] + [points[-1]]


@dataclass
class RunSummary:
    run_id: str
    path: Path
    method: str
    state: str
    started: float
    output: str
    message: str


def list_runs(runs_dir: Path) -> list[RunSummary]:
    """Every run directory, newest first."""
    if not runs_dir.is_dir():
        return []
    runs = []
    for path in runs_dir.iterdir():
        if not path.is_dir() or path.name.startswith("."):
            continue
        status = read_status(path)
        runs.append(RunSummary(path.name, path, status.get("method", "?"), effective_state(status),
                               status.get("created", path.stat().st_mtime), status.get("output", ""),
                               status.get("message", "")))
    return sorted(runs, key=lambda r: r.started, reverse=True)


class Watchers:
    """One watcher per run (or job) directory, shared by all browser sessions; `make` builds a watcher
    (RunWatcher for training runs) whose `refresh()` reads what was appended and returns the view."""

    def __init__(self, make: Callable[[Path], Any] | None = None) -> None:
        self._make = make or RunWatcher
        self._watchers: dict[Path, Any] = {}
        self._lock = threading.Lock()

    def view(self, run_dir: Path) -> Any:
        with self._lock:
            watcher = self._watchers.get(run_dir)
            if watcher is None:
                watcher = self._watchers[run_dir] = self._make(run_dir)
        return watcher.refresh()


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def now() -> float:
    return time.time()
