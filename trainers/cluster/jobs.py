"""Cluster job files for a run: a SLURM batch script and a Kubernetes (elastic rendezvous) Job. Torch-free.

Both start the run's own `accelerate launch` command (trainers/core/launch.py), one launcher per node, each node
filling in its own rank, so a cluster run is the multi-machine run of the GUI's "Show command": the same config,
the same accelerate.yaml for DeepSpeed/FSDP. The config and the run directory must be on storage every node
mounts at the same path (the run writes its events, saves and states there; rank 0 writes, the others read).
"""
from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from trainers.core.launch import accelerate_command
from trainers.core.options import ConfigError, ConfigIssue, TrainConfig

REPO = Path(__file__).resolve().parents[2]  # jobs run `-m trainers` from here (the same path on every node)
RANK_FLAG, ADDRESS_FLAG, THREADS_FLAG = "--machine_rank", "--main_process_ip", "--num_cpu_threads_per_process"
DEFAULT_IMAGE, DEFAULT_CLAIM = "atelier:latest", "atelier-shared"  # Kubernetes: edit them in the file, or give them


@dataclass(frozen=True)
class Layout:
    """Where the job runs: nodes, processes (GPUs) on each, and the paths and interpreter every node uses."""

    nodes: int
    processes_per_node: int
    config: Path
    run_dir: Path
    python: str = sys.executable

    @classmethod
    def of(cls, cfg: TrainConfig, config: Path, run_dir: Path, nodes: int | None = None,
           processes: int | None = None, python: str | None = None) -> "Layout":
        """The config's machines and processes, or `nodes` and `processes` (all nodes together) given instead;
        a ConfigError naming the flag when the processes do not split evenly over the nodes."""
        nodes = nodes or cfg.num_machines
        total = processes or cfg.num_processes * cfg.num_machines
        if nodes < 1 or total < nodes or total % nodes:
            raise ConfigError([ConfigIssue("num_machines", f"{total} processes do not split evenly over {nodes} "
                                           f"node(s): give a process count that is a multiple of {nodes} (each node "
                                           "runs the same number of processes, one a GPU)", "launch")])
        return cls(nodes, total // nodes, Path(config).resolve(), Path(run_dir).resolve(), python or sys.executable)

    def config_for(self, cfg: TrainConfig) -> TrainConfig:
        return cfg.replace(num_machines=self.nodes, num_processes=self.processes_per_node, machine_rank=0,
                           main_process_ip=cfg.main_process_ip or "main")


def shared_root(layout: Layout) -> str:
    """The folder holding both the config and the run directory: what every node must mount."""
    import os

    return os.path.commonpath([layout.config.parent, layout.run_dir])


def write_job_files(cfg: TrainConfig, layout: Layout, folder: Path) -> list[Path]:
    """<run>.sbatch and <run>.k8s.yaml in `folder` (Kubernetes with the default image and claim names)."""
    from trainers.core.fsio import atomic_write_text

    sbatch = Path(folder) / f"{layout.run_dir.name}.sbatch"
    atomic_write_text(sbatch, sbatch_script(cfg, layout))
    sbatch.chmod(0o755)
    k8s = Path(folder) / f"{layout.run_dir.name}.k8s.yaml"
    atomic_write_text(k8s, k8s_manifest(cfg, layout))
    return [sbatch, k8s]


def node_command(cfg: TrainConfig, layout: Layout, rank: str, address: str, flags: tuple[str, ...] = ()) -> str:
    """The shell line one node runs: the run's launch command (with launcher `flags` added) and `rank` and
    `address` left to the shell (e.g. "$SLURM_NODEID"); no thread count of the machine that wrote the file."""
    argv = accelerate_command(layout.config_for(cfg), layout.config, layout.run_dir, python=layout.python)
    if THREADS_FLAG in argv and not cfg.values.get("num_cpu_threads_per_process"):
        at = argv.index(THREADS_FLAG)
        del argv[at:at + 2]
    trainer = len(argv) - argv[::-1].index("-m") - 1  # `-m trainers <method> ...` ends the launcher's flags
    argv[trainer:trainer] = flags
    words = [shlex.quote(a) for a in argv]
    for flag, value in ((RANK_FLAG, rank), (ADDRESS_FLAG, address)):
        if flag in argv:  # one node: no machines to meet
            words[argv.index(flag) + 1] = value
    if ADDRESS_FLAG in argv and not cfg.main_process_ip.strip():
        # the scheduler's address is the run's: each node's trainer checks its config, which names none
        words += ["--set", f"main_process_ip={address}"]
    return " ".join(words)


def job_name(run_dir: Path) -> str:
    """A name SLURM and Kubernetes both accept: lowercase letters, digits and '-', at most 50 characters."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"atelier-{Path(run_dir).name}".lower()).strip("-")
    return name[:50].rstrip("-") or "atelier"


def sbatch_script(cfg: TrainConfig, layout: Layout) -> str:
    """A SLURM batch script: one task per node (srun), each starting the node's accelerate launcher."""
    line = node_command(cfg, layout, rank='"$SLURM_NODEID"', address='"$MAIN_PROCESS_IP"')
    run_dir = shlex.quote(str(layout.run_dir))
    return f"""#!/bin/bash
# SLURM job of Atelier run {layout.run_dir.name} ({cfg.method}): {layout.nodes} node(s) x {layout.processes_per_node} GPU(s).
# Written by `python -m trainers cluster sbatch`. Submit with: sbatch {shlex.quote(layout.run_dir.name)}.sbatch
# The config ({layout.config}) and the run directory must be on storage every node mounts at the same path.
#SBATCH --job-name={job_name(layout.run_dir)}
#SBATCH --nodes={layout.nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={layout.processes_per_node}
#SBATCH --output={layout.run_dir}/slurm-%j.out
set -euo pipefail
mkdir -p {run_dir}
cd {shlex.quote(str(REPO))}
# the first node of the allocation is machine 0: every node's launcher meets its main process there
mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")  # no pipe into head: pipefail and SIGPIPE
export MAIN_PROCESS_IP="${{NODES[0]}}"
srun --nodes={layout.nodes} --ntasks-per-node=1 bash -c {shlex.quote(line)}
"""


def k8s_manifest(cfg: TrainConfig, layout: Layout, image: str = DEFAULT_IMAGE, claim: str = DEFAULT_CLAIM,
                 mount: str | None = None) -> str:
    """A headless Service and an Indexed Job with one pod per node: torch elastic's c10d rendezvous on the first
    pod, each pod's rank its completion index; the shared volume `claim` mounted at `mount` (default: the folder
    holding the config and the run directory)."""
    import yaml

    mount = mount or shared_root(layout)
    name = job_name(layout.run_dir)
    address = f"{name}-0.{name}"
    line = node_command(cfg, layout, rank='"$JOB_COMPLETION_INDEX"', address=address,
                        flags=("--rdzv_backend", "c10d"))  # torch elastic's rendezvous, on the first pod
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
               "spec": {"clusterIP": "None", "selector": {"job-name": name},
                        "ports": [{"name": "rendezvous", "port": cfg.main_process_port}]}}
    container = {"name": "trainer", "image": image, "workingDir": str(REPO),
                 "command": ["bash", "-c", f"mkdir -p {shlex.quote(str(layout.run_dir))} && exec {line}"],
                 "resources": {"limits": {"nvidia.com/gpu": layout.processes_per_node}},
                 "volumeMounts": [{"name": "shared", "mountPath": mount}, {"name": "shm", "mountPath": "/dev/shm"}]}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
           "spec": {"completionMode": "Indexed", "completions": layout.nodes, "parallelism": layout.nodes,
                    "backoffLimit": 0,
                    "template": {"metadata": {"labels": {"job-name": name}},
                                 "spec": {"subdomain": name, "restartPolicy": "Never", "containers": [container],
                                          "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": claim}},
                                                      {"name": "shm", "emptyDir": {"medium": "Memory"}}]}}}}
    header = (f"# Kubernetes job of Atelier run {layout.run_dir.name} ({cfg.method}): {layout.nodes} pod(s) x "
              f"{layout.processes_per_node} GPU(s), written by `python -m trainers cluster k8s`.\n"
              f"# kubectl apply -f this file. The image holds Atelier at {REPO}; the claim {claim!r} (mounted at "
              f"{mount}) holds the config and the run directory.\n")
    return header + yaml.safe_dump_all([service, job], sort_keys=False)
