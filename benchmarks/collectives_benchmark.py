"""Collectives and bytes sent per optimizer step, LoRA and full finetune, on 1, 2 and 4 CPU processes (gloo).

    python benchmarks/collectives_benchmark.py                      # tiny SD1 model, 4 steps each, ~3-5 minutes
    python benchmarks/collectives_benchmark.py --processes 2 --methods finetune --backend fsdp

Each run is the real trainer launched as the GUI launches it (`accelerate launch`, ACCELERATE_USE_CPU=1), with the
test hook that wraps torch.distributed's collectives (tests/hooks/sitecustomize.py, ATELIER_TEST_COUNT_COLLECTIVES):
per step, rank 0's collectives and the bytes it handed to them, and DDP's gradient buckets (from the progress
events). The first step is left out (it also broadcasts the initial state). What to expect with DDP: a LoRA sends
its gradients in one bucket a step; a finetune in buckets of at most 100 MB, each sent while the backward pass goes
on through the earlier layers (so several buckets a step mean the all-reduce overlaps the backward); besides them,
one all-reduce of the loss and one broadcast of the GUI's stop/save requests. FSDP2 instead all-gathers weights and
reduce-scatters gradients, per wrapped module.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--methods", nargs="+", choices=("lora", "finetune"), default=["lora", "finetune"])
    p.add_argument("--backend", choices=("ddp", "fsdp"), default="ddp", help="fsdp: finetunes only (FSDP2)")
    p.add_argument("--steps", type=int, default=4)
    args = p.parse_args()

    from trainers.demo import build_dataset
    from trainers.models.sd.tiny import build_tiny_sd1

    work = Path(tempfile.mkdtemp(prefix="atelier-collectives-"))
    model, data = build_tiny_sd1(work / "model"), build_dataset(work / "data", folder="4_sks shape")
    print(f"{'method':<9} {'procs':>5} {'collectives/step':>17} {'MB sent/step':>13} {'grad buckets/step':>18}")
    for method in args.methods:
        for processes in args.processes:
            row = measure(method, processes, args.backend, args.steps, model, data, work / f"{method}-{processes}")
            print(f"{method:<9} {processes:>5} {row['collectives']:>17.1f} {row['mb']:>13.3f} {row['buckets']:>18.1f}",
                  flush=True)
            print(json.dumps({"method": method, "processes": processes, "backend": args.backend, **row}),
                  file=sys.stderr)


def measure(method: str, processes: int, backend: str, steps: int, model: Path, data: Path, work: Path) -> dict:
    """Run `steps` steps; the mean over the steps after the first of rank 0's collectives, MB and buckets."""
    counts = work / "counts.jsonl"
    work.mkdir(parents=True)
    values = {"pretrained_model_name_or_path": str(model), "train_data_dir": str(data), "output_dir": str(work / "o"),
              "resolution": "64", "max_data_loader_n_workers": 0, "train_batch_size": processes,
              "keep_global_batch": True, "max_train_steps": steps, "num_processes": processes}
    if method == "lora":
        values.update(network_dim=16, network_alpha=8)
    elif backend == "fsdp":
        values["distributed_backend"] = "fsdp"
    launcher = launch_flags(values, method, processes, work)
    sets = [a for k, v in values.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ACCELERATE_USE_CPU": "1", "ATELIER_TEST_COUNT_COLLECTIVES": str(counts),
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests" / "hooks")])}
    cmd = [sys.executable, "-m", *launcher, "-m", "trainers", method, "--run-dir", str(work / "run"), *sets]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    if done.returncode:
        raise SystemExit(f"{method} on {processes} processes failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in counts.read_text().splitlines()] if counts.exists() else []
    steady = [r for r in rows if r["rank"] == 0 and r["step"] > 1]
    events = [json.loads(line) for line in (work / "run" / "events.jsonl").read_text().splitlines()]
    buckets = [e.get("grad_buckets", 0) for e in events if e["type"] == "progress" and e["step"] > 1]
    return {"collectives": statistics.mean(r["collectives"] for r in steady) if steady else 0.0,
            "mb": statistics.mean(r["bytes"] for r in steady) / 2**20 if steady else 0.0,
            "buckets": statistics.mean(buckets) if buckets else 0.0}


def launch_flags(values: dict, method: str, processes: int, work: Path) -> list[str]:
    """`accelerate.commands.launch` flags as Atelier's own command gives them (accelerate.yaml for FSDP)."""
    from trainers.core.launch import write_accelerate_config
    from trainers.core.options import config_from_dict

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    written = write_accelerate_config(config_from_dict(method, values), work)
    shape = ["--config_file", str(written)] if written else (["--multi_gpu"] if processes > 1 else [])
    return ["accelerate.commands.launch", *shape, "--num_processes", str(processes), "--num_machines", "1",
            "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(port)]


if __name__ == "__main__":
    main()
