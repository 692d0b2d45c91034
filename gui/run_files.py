"""Reading run directories: everything the page shows about a run comes from these files.

Files are tailed with byte cursors (never re-read whole), and one RunWatcher per run is
shared by every browser session, so a refresh or a second browser costs nothing extra.
"""
from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainers.core import events as ev
from trainers.core.events import EventReader, TextTail, parse_event, progress_line
from trainers.core.registry import METHOD_NAMES
from trainers.core.lifecycle import settled_state
from trainers.core.rundir import CONFIG, EVENTS, HEALTH, LOG, RunState, read_status

MAX_CHART_POINTS = 400
MAX_KEPT_POINTS = 20_000
LOG_LINES = 200
NOT_CHECKED = "not checked"  # a run without a save health report (trainers/health/)


@dataclass
class RunView:
    """What the run panel shows, built from the run's files."""

    run_id: str
    state: RunState = RunState.UNKNOWN
    status: dict[str, Any] = field(default_factory=dict)
    progress: ev.Progress | None = None
    rank_step_s: list[float] = field(default_factory=list)  # each process's own seconds a step (multi-GPU runs)
    plan: dict[str, Any] = field(default_factory=dict)
    losses: list[tuple[int, float, float, float]] = field(default_factory=list)  # (step, loss, smoothed, lr)
    lr_planned: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # the whole run's schedule
    validation: list[tuple[int, float]] = field(default_factory=list)  # (step, validation loss)
    checkpoints: list[str] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    health: ev.Health | None = None  # the newest save's health check (trainers/health/)
    scores: list[ev.Scores] = field(default_factory=list)  # each scored sampling (trainers/scores/)
    live_renders: dict[str, ev.LiveRender] = field(default_factory=dict)  # a paused run's renders, by request id
    error: ev.Error | None = None
    output: str = ""
    log_tail: list[str] = field(default_factory=list)
    images: tuple[int, int] = (0, 0)  # a generation job's (done, total) images
    version: int = 0  # goes up whenever anything above changed (pages compare it, not the contents)


class RunWatcher:
    """Follows one run directory; `refresh()` reads only what was appended since last time."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        job = read_status(run_dir).get("method", METHOD_NAMES[0]) not in METHOD_NAMES  # the panel shows jobs too
        self.events = EventReader(run_dir, ev.JOB_EVENTS if job else ev.TRAINING_EVENTS)
        self.log = TextTail(run_dir / LOG, start_from_end_bytes=64 << 10)
        self.view = RunView(run_dir.name)
        self._log_lines: deque[str] = deque(maxlen=LOG_LINES)
        self._losses: list[tuple[int, float, float, float]] = []
        self._lock = threading.Lock()

    def refresh(self) -> RunView:
        with self._lock:
            lines = self.events.read_lines()
            progress = [i for i, line in enumerate(lines) if progress_line(line)]
            stride = len(progress) // MAX_KEPT_POINTS + 1  # a long backlog: parse a sample of its progress
            skip = set(progress[::1]) - set(progress[::stride]) - {progress[-1]} if stride > 1 else set()
            for i, line in enumerate(lines):
                event = self.events.parse(line) if i not in skip else None
                if event is not None:
                    self._apply(event)
            # progress bars redraw with \r: keep what the terminal would show last
            log_lines = self.log.read_new()
            self._log_lines.extend(line.rstrip("\r").split("\r")[-1] for line in log_lines)
            v = self.view
            status = read_status(self.run_dir)
            if lines or log_lines or status != v.status:
                v.version += 1
            v.status = status
            v.state = settled_state(self.run_dir, v.status)
            if v.state == RunState.FAILED and v.error is None and RunState.of(v.status.get("state")).active:
                v.error = ev.Error(message="the trainer process ended without reporting (killed by the system: "
                                           "likely out of system memory, or stopped from outside)")
            v.log_tail = list(self._log_lines)
            v.losses = _downsample(self._losses, MAX_CHART_POINTS)
            return v

    def _apply(self, event: ev.Event) -> None:
        v = self.view
        if isinstance(event, ev.Progress):
            v.progress = event
            if event.rank_step_s is not None:  # sent every few steps only
                v.rank_step_s = event.rank_step_s
            self._losses.append((event.step, event.loss, event.loss_smoothed, event.lr))
            if len(self._losses) > MAX_KEPT_POINTS:  # keep memory bounded on very long runs
                self._losses = self._losses[::2]
        elif isinstance(event, ev.Validation):
            v.validation.append((event.step, event.loss))
        elif isinstance(event, ev.Start):
            v.plan = event.plan
            v.lr_planned = planned_lr(self.run_dir, event.plan)
        elif isinstance(event, ev.Checkpoint):
            v.checkpoints.append(event.path)
        elif isinstance(event, ev.Sample):
            v.samples.append(event.path)
        elif isinstance(event, ev.Warning):
            v.warnings.append(event.message)
        elif isinstance(event, ev.Health):
            v.health = event
        elif isinstance(event, ev.Scores):
            v.scores.append(event)
        elif isinstance(event, ev.LiveRender):
            v.live_renders[event.request] = event
        elif isinstance(event, ev.Error):
            v.error = event
        elif isinstance(event, ev.Done):
            v.output = event.output
        elif isinstance(event, ev.JobStart):
            v.images = (0, event.total_images)
        elif isinstance(event, ev.GenerateProgress):
            v.images = (event.done, event.total or v.images[1])


def planned_lr(run_dir: Path, plan: dict[str, Any]) -> dict[str, list[tuple[int, float]]]:
    """The learning rate over the whole run as Validate draws it, from the run's config and step plan."""
    from gui.checks import lr_preview
    from trainers.core.options import ConfigError, load_config
    from trainers.core.plan import StepPlan

    try:
        cfg = load_config(read_status(run_dir).get("method", METHOD_NAMES[0]), run_dir / CONFIG)
        return lr_preview(cfg, StepPlan(**plan))[0]
    except (ConfigError, OSError, TypeError, ValueError):  # an old or hand-made run: no planned curve
        return {}


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
    state: RunState
    started: float
    output: str
    message: str
    ended: float | None = None
    resumed_from: str = ""  # the run this one continues (Resume)
    last_loss: float | None = None  # the smoothed loss of its last step
    health: str = NOT_CHECKED  # its newest save's health: "healthy", "N warnings" or "not checked" ("": a job)

    def duration_s(self) -> float | None:
        end = self.ended or (time.time() if self.state.active else None)
        return end - self.started if end else None


def list_runs(runs_dir: Path) -> list[RunSummary]:
    """Every run directory, newest first."""
    if not runs_dir.is_dir():
        return []
    runs = []
    for path in runs_dir.iterdir():
        if not path.is_dir() or path.name.startswith("."):
            continue
        status = read_status(path)
        runs.append(RunSummary(path.name, path, status.get("method", "?"), settled_state(path, status),
                               status.get("created", path.stat().st_mtime), status.get("output", ""),
                               status.get("message", ""), status.get("finished"), status.get("resumed_from", ""),
                               last_loss(path), health_text(path) if status.get("method") in METHOD_NAMES else ""))
    return sorted(runs, key=lambda r: r.started, reverse=True)


def last_loss(run_dir: Path, tail_bytes: int = 8192) -> float | None:
    """The smoothed loss of a run's last progress record, read from the end of events.jsonl only."""
    try:
        with open(run_dir / EVENTS, "rb") as fh:
            fh.seek(max(0, fh.seek(0, 2) - tail_bytes))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if progress_line(line):
            event = parse_event(line, ev.TRAINING_EVENTS)
            return event.loss_smoothed if isinstance(event, ev.Progress) else None
    return None


_HEALTH_READ: dict[Path, tuple[int, str]] = {}  # run dir -> (its health folder's mtime, the text read then)


def health_text(run_dir: Path) -> str:
    """The newest save's health verdict ("healthy", "N warnings") from the run's health/ folder, "not checked" when
    it holds no report. A report is written into the folder by a rename, so the folder's mtime says when to read
    again: an unchanged folder costs one stat."""
    folder = run_dir / HEALTH
    try:
        stamp = folder.stat().st_mtime_ns
    except OSError:
        return NOT_CHECKED
    known = _HEALTH_READ.get(run_dir)
    if known is not None and known[0] == stamp and time.time_ns() - stamp > 2_000_000_000:  # not changed since
        return known[1]  # (a folder changed within its clock's last tick could have changed again in that tick)
    text = NOT_CHECKED
    reports = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for report in reports:
        try:
            found = json.loads(report.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # being replaced, or not a report
            continue
        count = len(found.get("warnings") or []) if isinstance(found, dict) else 0
        text = f"{count} warning{'s' if count != 1 else ''}" if count else "healthy"
        break
    _HEALTH_READ[run_dir] = (stamp, text)
    return text


class Watchers:
    """One watcher per run (or job) directory, shared by all browser sessions; `make` builds a watcher
    (RunWatcher for training runs) whose `refresh()` reads what was appended and returns the view.

    A view is read from disk at most every `min_interval_s` whatever the number of open pages: twenty pages
    polling a run cost the server what one does.
    """

    def __init__(self, make: Callable[[Path], Any] | None = None, min_interval_s: float = 0.5) -> None:
        self._make = make or RunWatcher
        self.min_interval_s = min_interval_s
        self._watchers: dict[Path, Any] = {}
        self._read: dict[Path, tuple[float, Any]] = {}  # run dir -> (when read, view)
        self._lock = threading.Lock()

    def view(self, run_dir: Path) -> Any:
        with self._lock:
            watcher = self._watchers.get(run_dir)
            if watcher is None:
                watcher = self._watchers[run_dir] = self._make(run_dir)
            at, view = self._read.get(run_dir, (-1e9, None))
            now = time.monotonic()
            if view is not None and now - at < self.min_interval_s:
                return view
            view = watcher.refresh()
            self._read[run_dir] = (now, view)
            return view


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def now() -> float:
    return time.time()
