"""The page shows the save health check: the run panel the newest save's verdict and warnings (from the run's Health
events), the Runs table a health column (from the run's health/ folder: healthy / N warnings / not checked)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from trainers.core import events as ev
from trainers.health.report import write_report


def _run(runs: Path, name: str) -> Path:
    run = runs / name
    run.mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({"state": "finished", "method": "lora", "created": 1000.0}))
    return run


def _planted(run: Path, save: str, warnings: list[str], age_s: float) -> None:
    saved = run / "out" / save
    report = write_report(run, saved, {"file": str(saved), "verdict": "warnings" if warnings else "healthy",
                                       "warnings": warnings, "checks": {}})
    stamp = os.stat(report).st_mtime - age_s
    os.utime(report, (stamp, stamp))
    ev.EventWriter(run).emit(ev.Checkpoint(path=str(saved), epoch=1, step=2, final=False, kind="step"))
    ev.EventWriter(run).emit(ev.Health(path=str(saved), step=2, verdict="warnings" if warnings else "healthy",
                                       warnings=warnings, report=str(report)))


def test_the_run_panel_shows_the_newest_saves_verdict_and_warnings(tmp_path: Path) -> None:
    from gui.run_files import RunWatcher
    from gui.run_panel import result_text

    run = _run(tmp_path, "20260101-lora-a")
    _planted(run, "a-step00000002.safetensors", [], age_s=10)
    text = result_text(RunWatcher(run).refresh())
    assert "**Health of `a-step00000002.safetensors`:** healthy" in text
    _planted(run, "a.safetensors", ["the learned delta is zero in all 2 modules: the LoRA does nothing",
                                    "ComfyUI would not load 6 of 6 keys"], age_s=0)
    watcher = RunWatcher(run)
    text = result_text(watcher.refresh())
    assert "**Health of `a.safetensors`: 2 warnings**" in text
    assert "- the learned delta is zero in all 2 modules" in text and "- ComfyUI would not load 6 of 6 keys" in text
    assert "a-step00000002.safetensors`:** healthy" not in text


def test_the_runs_table_has_a_health_column(tmp_path: Path) -> None:
    from gui.page import RUN_COLUMNS, run_row
    from gui.run_files import list_runs

    healthy, warned, unchecked = (_run(tmp_path, n) for n in ("20260101-a", "20260101-b", "20260101-c"))
    _planted(healthy, "a.safetensors", [], age_s=0)
    _planted(warned, "b-step00000002.safetensors", [], age_s=10)  # an older save's report: not what is shown
    _planted(warned, "b.safetensors", ["NaN/Inf weights in 1 tensors"], age_s=0)
    job = _run(tmp_path, "20260101-generate")
    (job / "status.json").write_text(json.dumps({"state": "finished", "method": "generate", "created": 1000.0}))
    rows = {r.run_id: dict(zip(RUN_COLUMNS, run_row(r))) for r in list_runs(tmp_path)}
    assert rows[job.name]["health"] == "", "a job has no saves to check"
    assert rows[healthy.name]["health"] == "healthy"
    assert rows[warned.name]["health"] == "1 warning"
    assert rows[unchecked.name]["health"] == "not checked"
    _planted(warned, "b2.safetensors", ["x", "y"], age_s=-5)  # a newer save: the folder changed, read again
    assert {r.run_id: r.health for r in list_runs(tmp_path)}[warned.name] == "2 warnings"
