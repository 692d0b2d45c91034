"""The launcher the GUI starts runs with: a refused config ends with exit status 2 and the trainer's own message,
a crash with 1, never with accelerate's traceback on top."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, free_port


def launch(tmp_path: Path, *launch_args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "trainers.train.launcher", *launch_args, "-m", "trainers", "lora", "--run-dir",
           str(tmp_path / "run"), "--set", "max_train_steps=1", "--set", f"output_dir={str(tmp_path / 'o')!r}"]
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_refused_config_exits_2_with_the_trainers_message_only(tmp_path: Path) -> None:
    result = launch(tmp_path, "--num_processes", "1", "--num_machines", "1", "--mixed_precision", "no",
                    "--dynamo_backend", "no")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "pretrained_model_name_or_path: is required" in result.stderr
    assert "Traceback" not in result.stderr and "CalledProcessError" not in result.stderr


@pytest.mark.slow
def test_two_processes_refusing_a_config_exit_2_too(tmp_path: Path) -> None:
    result = launch(tmp_path, "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
                    "--dynamo_backend", "no", "--main_process_port", str(free_port()), env={"ACCELERATE_USE_CPU": "1"})
    assert result.returncode == 2, result.stderr[-2000:]
    assert "pretrained_model_name_or_path: is required" in result.stderr
    assert "Traceback" not in result.stderr


def _probe(tmp_path: Path, *launch_args: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    """Launch a module that reports its pid and the environment accelerate gives it: (launcher pid, report)."""
    import json

    (tmp_path / "env_probe.py").write_text(
        "import json, os\nprint(json.dumps({'pid': os.getpid(), **{k: os.environ.get(k) for k in ("
        "'OMP_NUM_THREADS', 'ACCELERATE_MIXED_PRECISION', 'ACCELERATE_DYNAMO_BACKEND', 'CUDA_VISIBLE_DEVICES', "
        "'ACCELERATE_USE_CPU')}}))\n", encoding="utf-8")
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)]), "HF_HOME": str(tmp_path),
                **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "trainers.train.launcher", *launch_args, "-m", "env_probe"],
                            cwd=REPO, env=full_env, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=120)
    return proc.pid, json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
def test_one_process_starts_in_the_launchers_own_process_with_accelerates_environment(tmp_path: Path) -> None:
    flags = ("--num_cpu_threads_per_process", "2", "--num_processes", "1", "--num_machines", "1", "--mixed_precision",
             "bf16", "--dynamo_backend", "no", "--main_process_port", "29500", "--gpu_ids", "1")
    pid, seen = _probe(tmp_path, *flags)
    assert seen == {"pid": pid, "OMP_NUM_THREADS": "2", "ACCELERATE_MIXED_PRECISION": "bf16",
                    "ACCELERATE_DYNAMO_BACKEND": "NO", "CUDA_VISIBLE_DEVICES": "1", "ACCELERATE_USE_CPU": "False"}
    (tmp_path / "accelerate").mkdir()  # the user's own accelerate config: accelerate launch reads it
    (tmp_path / "accelerate" / "default_config.yaml").write_text("compute_environment: LOCAL_MACHINE\n"
                                                                 "distributed_type: 'NO'\nmixed_precision: bf16\n")
    pid, seen = _probe(tmp_path, *flags)
    assert seen["pid"] != pid and seen["OMP_NUM_THREADS"] == "2" and seen["ACCELERATE_MIXED_PRECISION"] == "bf16"
