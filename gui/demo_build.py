"""`app.py --demo`: the demo model is made ready while the page already serves.

The build runs in a process of its own (`python -m trainers demo --if-missing --progress FILE`, in the GUI's
process group and ending with it): the GUI neither imports torch nor waits for it. With the weights the repo ships it
takes seconds; when it has to teach the model (a recipe without shipped weights) it takes minutes, and the page shows
how far it is from the small JSON file the build rewrites, as the run panel reads run files. Start on a config that
reads the demo folder queues its run until the demo is ready (DemoQueue) instead of failing on a missing model.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from gui.checks import CheckReport, check_form, outside_roots
from gui.jobs import JobManager
from gui.run_files import format_duration
from gui.run_queue import RunQueue
from trainers.core.options import TrainConfig
from trainers.core.processes import pid_alive
from trainers.core.rundir import read_status, update_status
from trainers.core.secrets import trainer_environment
from trainers.demo import PROGRESS, demo_is_built
from trainers.preflight.validate import validate

REPO = Path(__file__).resolve().parents[1]
WAITS_FOR = "waits_for_demo"  # in a queued run's status.json: it starts once the demo is ready


@dataclass(frozen=True)
class DemoState:
    ready: bool
    building: bool
    text: str  # what the page says (markdown)


class DemoBuild:
    """The demo folder of `app.py --demo`: starts its build when needed and says how far it is."""

    def __init__(self, folder: Path, python: str = sys.executable) -> None:
        self.folder = Path(folder).expanduser().resolve()
        self.python = python
        self.progress_file = self.folder / PROGRESS
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Build the demo in the background unless it is built or a build (of an earlier GUI too) is under way."""
        with self._lock:
            if demo_is_built(self.folder) or self._build_running():
                return
            self.folder.mkdir(parents=True, exist_ok=True)
            argv = [self.python, "-m", "trainers", "demo", "--out", str(self.folder), "--if-missing",
                    "--progress", str(self.progress_file), "--stop-with-parent"]
            env = trainer_environment({**os.environ, "PYTHONUNBUFFERED": "1"})
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
            self.progress_file.unlink(missing_ok=True)  # an earlier build's, whose process is gone
            self._proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, text=True, errors="replace")
            threading.Thread(target=self._echo, args=(self._proc,), name="demo-build", daemon=True).start()

    def _build_running(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        progress = self._progress()
        pid = progress.get("pid")
        return progress.get("state") == "building" and isinstance(pid, int) and pid_alive(pid)

    @staticmethod
    def _echo(proc: subprocess.Popen) -> None:
        """The build's lines on the GUI's console, as `app.py --demo` printed them before it served."""
        assert proc.stdout is not None
        for line in proc.stdout:
            print(f"demo {line.rstrip()}", flush=True)

    def _progress(self) -> dict[str, Any]:
        try:
            return json.loads(self.progress_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    @property
    def ready(self) -> bool:
        return demo_is_built(self.folder)

    def state(self) -> DemoState:
        if self.ready:
            return DemoState(True, False, "**The demo model is ready**: press **Start** on the LoRA tab (the demo "
                                          "preset is loaded), or **Generate** on the Generate tab.")
        progress = self._progress()
        exit_code = self._proc.poll() if self._proc is not None else None
        if progress.get("state") == "failed" or exit_code is not None:
            why = progress.get("message") or f"the build ended with exit code {exit_code}"
            return DemoState(False, False, f"**The demo model could not be built**: {why}. The console shows the "
                                           f"build's output; `python -m trainers demo --out {self.folder}` builds it "
                                           "by hand.")
        return DemoState(False, True, building_text(progress))

    def reads_demo(self, cfg: TrainConfig) -> bool:
        """The config's model or dataset lies in the demo folder (relative paths are the repo's, as the preset's)."""
        for name in ("pretrained_model_name_or_path", "train_data_dir"):
            text = str(cfg.values.get(name) or "")
            if text and (REPO / Path(text).expanduser()).resolve().is_relative_to(self.folder):
                return True
        return False


def building_text(progress: dict[str, Any]) -> str:
    """"Preparing the demo model: teaching it shapes, denoiser step 120/600, ETA 2:10" from the build's report."""
    stage, step, steps = progress.get("stage") or "starting", progress.get("step") or 0, progress.get("steps") or 0
    where = f"teaching it shapes, {stage} step {step}/{steps}" if steps else f"{stage}…"
    eta = progress.get("eta_s")
    eta_text = f", ETA {format_duration(eta)}" if isinstance(eta, (int, float)) else ""
    return (f"**Preparing the demo model** (once): {where}{eta_text}. **Start** on the demo preset queues its run "
            "until the model is ready.")


def check_start(method: str, values: dict[str, Any], allowed_roots: list[Path] | None,
                demo: DemoBuild | None) -> CheckReport:
    """Validate and Start: while the demo is being prepared, a config that reads it is checked without looking for
    its files (they appear when the build is done); Start queues its run until then (DemoQueue)."""
    report = check_form(method, values, allowed_roots)
    if report.ok or demo is None or report.cfg is None or demo.ready or not demo.reads_demo(report.cfg):
        return report
    issues = validate(report.cfg, check_paths=False) + outside_roots(report.cfg, allowed_roots)
    return CheckReport(report.cfg, issues, [*report.warnings, "the demo model is still being prepared (see the top of "
                                            "the page): Start queues the run until it is ready"])


def build_demo_notice(demo: DemoBuild | None) -> None:
    """A line at the top of the page while the demo is being prepared, and that it is ready once it is (inside the
    page's gradio context). A GUI that found the demo built shows none."""
    if demo is None or demo.ready:
        return
    notice = gr.Markdown(demo.state().text, elem_id="demo-notice")
    timer = gr.Timer(1.0)

    def tick() -> tuple[Any, Any]:
        state = demo.state()
        return gr.Markdown(state.text), gr.Timer(active=state.building)

    timer.tick(tick, outputs=[notice, timer], show_progress="hidden")


class DemoQueue(RunQueue):
    """The run queue of `app.py --demo`: a run that reads the demo folder waits in the queue until it is built."""

    def __init__(self, jobs: JobManager, demo: DemoBuild) -> None:
        super().__init__(jobs)
        self.demo = demo

    def submit(self, cfg: TrainConfig) -> tuple[Path, str]:
        if self.demo.ready or not self.demo.reads_demo(cfg):
            return super().submit(cfg)
        with self._lock:
            run_dir = self.enqueue(cfg, message="waits for the demo model to be ready", **{WAITS_FOR: True})
        return run_dir, (f"Queued `{run_dir.name}`: it starts by itself when the demo model is ready (the line at "
                         "the top of the page says how far it is).")

    def queued(self) -> list[Path]:
        """Queued runs that may start (those waiting for the demo only once it is built)."""
        runs = super().queued()
        if self.demo.ready:
            return runs
        return [r for r in runs if not read_status(r).get(WAITS_FOR)]

    def _start(self, run_dir: Path, method: str) -> bool:
        if read_status(run_dir).get(WAITS_FOR):
            update_status(run_dir, message="", **{WAITS_FOR: False})
        return super()._start(run_dir, method)
