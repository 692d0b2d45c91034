"""TensorBoard logs without setting logging_dir: a run with a run folder logs into its logs/, one folder per run,
so the run panel's TensorBoard button always has something to open; an explicit logging_dir is kept."""
from __future__ import annotations

from pathlib import Path

import pytest

from trainers.core.options import load_config
from trainers.train.session import make_accelerator


@pytest.mark.parametrize("logging_dir", ["", "explicit"])
def test_trainer_logs_to_the_run_folder_unless_logging_dir_is_set(logging_dir: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "20260101-000000-tb"
    chosen = str(tmp_path / logging_dir) if logging_dir else ""
    cfg = load_config("lora", overrides=[f"logging_dir={chosen!r}".replace("'", '"')])
    accelerator = make_accelerator(cfg, run_dir)
    expected = Path(chosen) if chosen else run_dir / "logs"
    assert Path(accelerator.logging_dir) == expected and accelerator.log_with
    accelerator.init_trackers(run_dir.name)  # as the Reporter does
    accelerator.log({"loss": 0.5}, step=1)
    accelerator.end_training()
    assert list((expected / run_dir.name).glob("events.out.tfevents*"))
