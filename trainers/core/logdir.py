"""Where a run's TensorBoard logs go: `logging_dir` when it is set, else the run folder's `logs/`, so every run
started by the GUI (or with a run folder) can be opened in TensorBoard. Torch-free: the GUI finds them here too."""
from __future__ import annotations

from pathlib import Path

RUN_LOGS = "logs"  # inside the run folder


def tensorboard_dir(logging_dir: str | None, run_dir: Path | None) -> Path | None:
    """The folder TensorBoard logs of a run go to; None without logging_dir and without a run folder."""
    configured = str(logging_dir or "").strip()
    if configured:
        return Path(configured).expanduser()
    return Path(run_dir) / RUN_LOGS if run_dir is not None else None
