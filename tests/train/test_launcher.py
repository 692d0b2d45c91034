"""The launcher the GUI starts runs with: a refused config ends with exit status 2 and the trainer's own message,
a crash with 1, never with accelerate's traceback on top."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO


def launch(tmp_path: Path, *launch_args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "trainers.train.launcher", *launch_args, "-m", "trainers", "lora", "--run-dir",
           str(tmp_path / "run"), "--set", "max_train_steps=1", "--set", f"output_dir={str(tmp_path / 'o')!r}"]
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=300)


def test_a_refused_config_exits_2_with_the_trainers_message_only(tmp_path: Path) -> None:
    result = launch(tmp_path, "--num_processes", "1", "--num_machines", "1", "--mixed_precision", "no",
                    "--dynamo_backend", "no")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "pretrained_model_name_or_path: is required" in result.stderr
    assert "Traceback" not in result.stderr and "CalledProcessError" not in result.stderr


@pytest.mark.slow
def test_two_processes_refusing_a_config_exit_2_too(tmp_path: Path) -> None:
    result = launch(tmp_path, "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
                    "--dynamo_backend", "no", "--main_process_port", "29541", env={"ACCELERATE_USE_CPU": "1"})
    assert result.returncode == 2, result.stderr[-2000:]
    assert "pretrained_model_name_or_path: is required" in result.stderr
    assert "Traceback" not in result.stderr
