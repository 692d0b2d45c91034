"""The multi-machine panel behind "Show command": the command for every machine, what can be checked from this
machine about the main address (it resolves; machine 0: its port is free; the others: it answers), and the run's
cluster job files (SLURM, Kubernetes) to download. Torch-free."""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from trainers.cluster.jobs import Layout, write_job_files
from trainers.core.launch import main_address_check, needs_config_file, other_machine_commands
from trainers.core.options import TrainConfig


@dataclass(frozen=True)
class MachinesPanel:
    text: str  # shell lines with comments, one command a machine
    files: list[str]  # cluster job files


def machines_panel(cfg: TrainConfig, argv: list[str], config: Path, run_dir: Path) -> MachinesPanel:
    """What "Show command" shows for the command `argv` Start would run, its config written to `config`."""
    beside = " and accelerate.yaml beside it" if needs_config_file(cfg) else ""  # DeepSpeed / FSDP
    lines = [f"# this machine (config written to {config}{beside})", shlex.join(argv)]
    for rank, line in enumerate(other_machine_commands(cfg, config, run_dir), start=1):
        lines += [f"# machine {rank} (copy {config}{beside} there first, or keep runs on shared storage)", line]
    if cfg.num_machines > 1:
        problem, found = main_address_check(cfg.main_process_ip, cfg.main_process_port, cfg.machine_rank,
                                            timeout_s=2.0)
        lines.insert(0, f"# PROBLEM {problem}" if problem else f"# checked from this machine: {found}")
    files = write_job_files(cfg, Layout.of(cfg, config, run_dir), Path(config).parent)
    return MachinesPanel("\n".join(lines), [str(f) for f in files])
