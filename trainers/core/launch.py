"""The `accelerate launch` command of a run, built from the config's launch group.

Used by the GUI (Start, "print the command") and by headless users; argv lists only.
"""
from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

from trainers.core.options import TrainConfig
from trainers.train.distributed import ACCELERATE_CONFIG, needs_config_file


def accelerate_command(cfg: TrainConfig, config_path: Path, run_dir: Path, machine_rank: int | None = None,
                       python: str = sys.executable) -> list[str]:
    """argv of `accelerate launch … -m trainers <method> --config … --run-dir …`.

    num_processes in the config counts processes on each machine; accelerate wants the total.
    DeepSpeed and FSDP runs read `<run_dir>/accelerate.yaml` (written by `write_accelerate_config`).
    """
    rank = cfg.machine_rank if machine_rank is None else machine_rank
    total = cfg.num_processes * cfg.num_machines
    cmd = [python, "-m", "accelerate.commands.launch"]
    if needs_config_file(cfg):  # DeepSpeed / FSDP: the run's accelerate.yaml says how (the flags below agree)
        cmd += ["--config_file", str(Path(run_dir) / ACCELERATE_CONFIG)]
    elif total > 1:
        cmd.append("--multi_gpu")
    cmd += ["--num_processes", str(total), "--num_machines", str(cfg.num_machines),
            "--mixed_precision", cfg.mixed_precision, "--dynamo_backend", cfg.dynamo_backend,
            "--main_process_port", str(cfg.main_process_port)]
    if cfg.gpu_ids.strip():
        cmd += ["--gpu_ids", cfg.gpu_ids.replace(" ", "")]
    if cfg.num_machines > 1:
        cmd += ["--machine_rank", str(rank), "--main_process_ip", cfg.main_process_ip]
    return cmd + ["-m", "trainers", cfg.method, "--config", str(config_path), "--run-dir", str(run_dir)]


def launch_env(cfg: TrainConfig) -> dict[str, str]:
    """Extra environment: without NVIDIA GPUs, several processes run as CPU DDP (gloo)."""
    if cfg.num_processes > 1 and shutil.which("nvidia-smi") is None:
        return {"ACCELERATE_USE_CPU": "1"}
    return {}


def other_machine_commands(cfg: TrainConfig, config_path: Path, run_dir: Path) -> list[str]:
    """Shell lines to run on machines 1..N-1 (same paths assumed on every machine)."""
    return [shlex.join(accelerate_command(cfg, config_path, run_dir, machine_rank=rank))
            for rank in range(1, cfg.num_machines)]
