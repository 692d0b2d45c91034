"""A tool's run in its job folder: progress with an ETA, stop requests, where outputs go, the report. Torch-free.

Every verb module has `run(cfg, job) -> Path` (its main output); `run_tool` starts the job's events and calls it.
Outputs are written beside their final name and renamed into place (trainers/core/fsio.py), so an input is never
touched and a stopped or failed job leaves no half-written file.
"""
from __future__ import annotations

import importlib
import json
import time
from pathlib import Path
from typing import Any

from trainers.core import events as ev
from trainers.core.fsio import atomic_write_text
from trainers.core.rundir import Request, take_requests
from trainers.tools.events import ToolOutput, ToolProgress, ToolReport, ToolStart
from trainers.tools.options import ToolConfig, main_input

REPORT_MD, REPORT_JSON = "report.md", "report.json"
PROGRESS_EVERY_S = 0.5


class ToolStopped(RuntimeError):
    """The user stopped the job; nothing half-written is left."""


class ToolJob:
    """What a verb's run writes to its folder (None: nothing but the outputs, e.g. when called from tests)."""

    def __init__(self, cfg: ToolConfig, folder: Path | None, events: ev.EventWriter | None = None) -> None:
        self.cfg, self.folder = cfg, Path(folder) if folder is not None else None
        self.events = events or ev.EventWriter(self.folder)
        self.outputs: list[Path] = []
        self._stage: tuple[str, float] = ("", time.monotonic())
        self._last = 0.0

    def progress(self, stage: str, done: int, total: int) -> None:
        """Report `done` of `total` in `stage` (at most every half second, and at the end); raise ToolStopped when
        the user asked the job to stop."""
        now = time.monotonic()
        if stage != self._stage[0]:
            self._stage = (stage, now)
        if Request.STOP in take_requests(self.folder):
            raise ToolStopped(f"stopped during {stage} ({done} of {total}); nothing was written")
        if done < total and now - self._last < PROGRESS_EVERY_S:
            return
        self._last = now
        elapsed = now - self._stage[1]
        eta = round(elapsed / done * (total - done), 1) if 0 < done < total else None
        self.events.emit(ToolProgress(stage=stage, done=done, total=total, eta_s=eta))

    def output_path(self, default_name: str) -> Path:
        """Where the result goes: save_to, or `default_name` in the job folder (or beside the input without one)."""
        given = str(self.cfg.values.get("save_to") or "").strip()
        if given:
            return Path(given).expanduser()
        folder = self.folder or Path(main_input(self.cfg)).expanduser().parent
        return folder / default_name

    def wrote(self, path: Path, kind: str) -> None:
        self.outputs.append(Path(path))
        self.events.emit(ToolOutput(path=str(path), kind=kind))

    def warn(self, message: str) -> None:
        self.events.warn(message)

    def report(self, title: str, markdown: str, data: dict[str, Any], details: str = "") -> None:
        """The result in words and as data: report.md (with `details`, e.g. a row per module) and report.json in the
        job folder, and a report event (without the details: the page shows it)."""
        if self.folder is not None:
            atomic_write_text(self.folder / REPORT_MD, f"# {title}\n\n{markdown}\n\n{details}".rstrip() + "\n")
            atomic_write_text(self.folder / REPORT_JSON, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
            self.wrote(self.folder / REPORT_MD, "report")
            self.wrote(self.folder / REPORT_JSON, "report")
        self.events.emit(ToolReport(title=title, markdown=markdown))


def run_tool(cfg: ToolConfig, folder: Path | None, events: ev.EventWriter | None = None) -> tuple[Path, ToolJob]:
    """Run `cfg`'s verb in `folder`; returns its main output and the job (its outputs)."""
    job = ToolJob(cfg, folder, events)
    inputs = [str(v) for o in cfg.options if o.group == "input" and (v := cfg.values[o.name]) and o.kind == "str"]
    job.events.emit(ToolStart(verb=cfg.verb, inputs=inputs + [str(v) for v in cfg.values.get("loras", [])]))
    module = importlib.import_module(f"trainers.tools.{cfg.verb}")
    return module.run(cfg, job), job
