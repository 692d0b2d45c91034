"""A save's health report in the run folder (<run>/health/<save file name>.json) and what a run is handed to write
it (trainers/__main__.py puts `check_and_write` in the run's Checks). Torch-free: the check itself (torch, the LoRA
readers) is imported when the first save is checked, so a refused config still stops before torch loads."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainers.core.fsio import atomic_path
from trainers.core.rundir import HEALTH

NO_RENDERS = "the effect was not checked"


def check_and_write(saved: Path, run_dir: Path, family: str | None,
                    renders: tuple[Path, Path] | str = NO_RENDERS) -> dict[str, Any]:
    """The report of the save `saved`, written to the run's health/ folder ("report": its path). `renders`: the
    effect check's (base image, image with the save) of the first sample prompt, or why there are none."""
    from trainers.health.check import check_save

    base, with_save = renders if isinstance(renders, tuple) else (None, None)
    report = check_save(saved, family, base, with_save)
    if isinstance(renders, str):
        report["checks"]["effect"] = {"checked": False, "reason": renders}
    report["report"] = str(write_report(run_dir, saved, report))
    return report


def report_path(run_dir: Path, saved: Path) -> Path:
    return run_dir / HEALTH / f"{saved.name}.json"


def write_report(run_dir: Path, saved: Path, report: dict[str, Any]) -> Path:
    target = report_path(run_dir, saved)
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        Path(tmp).write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    return target
