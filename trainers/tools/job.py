"""A tool's run in its job folder (trainers/core/job.py: progress with an ETA, stop requests, the report) and where
its outputs go. Torch-free.

Every verb module has `run(cfg, job) -> Path` (its main output); `run_tool` starts the job's events and calls it.
Outputs are written beside their final name and renamed into place (trainers/core/fsio.py), so an input is never
touched and a stopped or failed job leaves no half-written file.
"""
from __future__ import annotations

import importlib
from pathlib import Path

from trainers.core import events as ev
from trainers.core.job import JobFolder
from trainers.tools.events import ToolStart
from trainers.tools.options import ToolConfig, main_input


class ToolJob(JobFolder):
    """What a verb's run writes to its folder (None: nothing but the outputs, e.g. when called from tests)."""

    cfg: ToolConfig

    def output_path(self, default_name: str) -> Path:
        """Where the result goes: save_to, or `default_name` in the job folder (or beside the input without one)."""
        given = str(self.cfg.values.get("save_to") or "").strip()
        if given:
            return Path(given).expanduser()
        folder = self.folder or Path(main_input(self.cfg)).expanduser().parent
        return folder / default_name


def run_tool(cfg: ToolConfig, folder: Path | None, events: ev.EventWriter | None = None) -> tuple[Path, ToolJob]:
    """Run `cfg`'s verb in `folder`; returns its main output and the job (its outputs)."""
    job = ToolJob(cfg, folder, events)
    inputs = [str(v) for o in cfg.options if o.group == "input" and (v := cfg.values[o.name]) and o.kind == "str"]
    job.events.emit(ToolStart(verb=cfg.verb, inputs=inputs + [str(v) for v in cfg.values.get("loras", [])]))
    module = importlib.import_module(f"trainers.tools.{cfg.verb}")
    return module.run(cfg, job), job
