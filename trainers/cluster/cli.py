"""`python -m trainers cluster sbatch|k8s <config>`: a run's cluster job file, on stdout or in --out."""
from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

from trainers.cluster.jobs import DEFAULT_CLAIM, DEFAULT_IMAGE
from trainers.core.errors import EXIT_BAD_INPUT
from trainers.core.fsio import atomic_write_text

KINDS = {"sbatch": "a SLURM batch script (srun, one accelerate launcher a node)",
         "k8s": "a Kubernetes Indexed Job and headless Service (one pod a node, torch elastic's c10d rendezvous)"}


def add_arguments(commands: argparse._SubParsersAction) -> None:
    cluster = commands.add_parser("cluster", help="write a cluster job file (SLURM sbatch, Kubernetes) for a config")
    cluster.set_defaults(job_main=main)
    cluster.add_argument("kind", choices=list(KINDS), help="; ".join(f"{k}: {v}" for k, v in KINDS.items()))
    cluster.add_argument("config", type=Path, help="the run's config (TOML), on storage every node mounts")
    cluster.add_argument("--run-dir", type=Path, help="run directory on the shared storage (default: runs/<config "
                         "stem> beside the config's folder)")
    cluster.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                         help="override one option of the config (TOML value); repeatable")
    cluster.add_argument("--nodes", type=int, help="nodes (default: the config's num_machines)")
    cluster.add_argument("--processes", type=int, help="processes (GPUs) on all nodes together (default: "
                         "num_processes x num_machines); must split evenly over the nodes")
    cluster.add_argument("--python", help="the Python of Atelier's environment on the nodes (default: this one)")
    cluster.add_argument("--image", default=DEFAULT_IMAGE, help="k8s: the container image holding Atelier")
    cluster.add_argument("--claim", default=DEFAULT_CLAIM, help="k8s: the PersistentVolumeClaim of the shared storage")
    cluster.add_argument("--mount", help="k8s: where the claim is mounted (default: the folder holding the config "
                         "and the run directory)")
    cluster.add_argument("--out", type=Path, help="write the file here (default: stdout)")


def main(args: argparse.Namespace) -> int:
    from trainers.cluster.jobs import Layout, k8s_manifest, sbatch_script
    from trainers.core.launch import write_accelerate_config
    from trainers.core.options import ConfigError, load_config

    config = args.config.resolve()
    try:
        cfg = load_config(_method_of(config), config, args.overrides)
        run_dir = args.run_dir or config.parent / "runs" / config.stem
        layout = Layout.of(cfg, config, run_dir, args.nodes, args.processes, args.python)
    except (ConfigError, OSError, tomllib.TOMLDecodeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    written = write_accelerate_config(layout.config_for(cfg), config.parent)  # DeepSpeed/FSDP: beside the config
    if written:
        print(f"wrote {written} (the nodes' launchers read it)", file=sys.stderr)
    if args.kind == "sbatch":
        text = sbatch_script(cfg, layout)
    else:
        text = k8s_manifest(cfg, layout, args.image, args.claim, args.mount)
    if args.out:
        atomic_write_text(args.out, text)
        if args.kind == "sbatch":
            args.out.chmod(0o755)
    else:
        print(text, end="")
    return 0


def _method_of(config: Path) -> str:
    """The method a config is for: its `method` key (Atelier writes it), else LoRA."""
    with open(config, "rb") as f:
        return str(tomllib.load(f).get("method", "lora"))
