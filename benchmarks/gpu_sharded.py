"""The GPU check's sharded parts: DeepSpeed ZeRO-3, ZeRO-2 with its CPU optimizer offload and FSDP2, each on the one
GPU as one process launched with the run's own accelerate.yaml (as Start launches it), against the same finetune as
one plain process. Two processes cannot share one GPU (NCCL refuses two ranks on one device), so one process is the
most one card checks: the backend's wrapping, its optimizer, its gathers for the save.

Each part reports steps/s, peak memory (the run's progress events: max_memory_allocated) and its losses against the
one-process run's (the same seed: the same random weights, images and noise). The ZeRO-3 part also saves its
training state (DeepSpeed's own checkpoint, each process its partition) halfway and resumes it in a second launch,
whose losses must be those of the uninterrupted run's second half. A dry run on the CPU launches none of
them: ZeRO-3 is refused on CPU processes and DeepSpeed's CPU Adam would be compiled first; it checks each part's
config as Validate does and writes its accelerate.yaml, and reports the parts skipped.

    accelerate launch --config_file RUN/accelerate.yaml -m benchmarks.gpu_sharded VALUES.json RUN   # one part's run
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.gpu_models import REPO, model_folder
from benchmarks.gpu_runner import PartContext, Skip
from benchmarks.pages_benchmark import free_port

BASELINE = "sharded-baseline"
LOSS_TOLERANCE = 1e-2  # relative, any step: optimizer rounding (DeepSpeed's CPU Adam is not torch's AdamW) only
RESUME_TOLERANCE = 1e-3  # relative: the same backend resumed; GPU kernels' nondeterminism only
STEPS = {True: 3, False: 20}  # dry run (tiny), GPU
# SD1.5's real UNet, full finetune in float32 at 256 px: every backend's master weights are float32, so the losses
# differ by rounding only.
VALUES = {"cache_latents": True, "cache_text_encoder_outputs": True, "optimizer_type": "AdamW", "learning_rate": 1e-5,
          "max_data_loader_n_workers": 0, "seed": 0, "mixed_precision": "no", "train_batch_size": 1,
          "save_precision": "float"}
BACKENDS: dict[str, dict[str, Any]] = {
    BASELINE: {},
    "sharded-fsdp2": {"distributed_backend": "fsdp", "fsdp_version": 2},
    "sharded-zero2-offload": {"distributed_backend": "deepspeed", "zero_stage": 2, "offload_optimizer": True},
    "sharded-zero3": {"distributed_backend": "deepspeed", "zero_stage": 3},
}


@dataclass(frozen=True)
class ShardedRun:
    """One finetune launched as the GUI launches it; with `backend` values, compared against the baseline part."""
    name: str
    backend: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 60.0  # the launched processes' (short of the part's budget: a cut part cannot end them)
    resumes: bool = False  # also save a training state halfway and resume it in a second launch

    def values(self, sizes: Any, data: Path, output: Path) -> dict[str, Any]:
        halfway = {"save_every_n_steps": self.halfway(sizes), "save_state": True} if self.resumes else {}
        return {**VALUES, **self.backend, "train_data_dir": str(data), "output_dir": str(output),
                "pretrained_model_name_or_path": str(model_folder("sd15", sizes.work, sizes.tiny)),
                "resolution": str(resolution(sizes)), "max_train_steps": STEPS[sizes.tiny], **halfway}

    @staticmethod
    def halfway(sizes: Any) -> int:
        return STEPS[sizes.tiny] // 2

    def command(self, values: dict[str, Any], run_dir: Path) -> list[str]:
        """`accelerate launch` with the run's accelerate.yaml (the baseline: plain python), written into run_dir."""
        from benchmarks.train_benchmark import bench_config
        from trainers.core.launch import write_accelerate_config
        from trainers.train.optim import check_optimizer
        from trainers.preflight.validate import check

        cfg = bench_config("finetune", values)
        check(cfg)  # raises ConfigError naming each problem, as Validate would
        check_optimizer(cfg)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "values.json").write_text(json.dumps(values), encoding="utf-8")
        accelerate_yaml = write_accelerate_config(cfg, run_dir)
        if accelerate_yaml is None:
            launcher = [sys.executable]
        else:
            launcher = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(accelerate_yaml),
                        "--num_processes", "1", "--main_process_port", str(free_port())]
        return [*launcher, "-m", "benchmarks.gpu_sharded", str(run_dir / "values.json"), str(run_dir)]

    def __call__(self, ctx: PartContext) -> None:
        from trainers.demo import build_dataset

        sizes = ctx.settings
        if self.backend.get("distributed_backend") == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
            raise Skip("the deepspeed package is not installed here (bash benchmarks/gpu_prepare.sh carries it)")
        work = sizes.work / f"{self.name}-{time.time_ns()}"
        ctx.phase("building the dataset and checking the config")
        data = build_dataset(work / "data", folder="100_bench", size=resolution(sizes))
        values = self.values(sizes, data, work / "out")
        command = self.command(values, work / "run")
        if sizes.tiny:
            raise Skip("not run in a dry run (needs a CUDA GPU: ZeRO-3 is refused on CPU processes, DeepSpeed's CPU "
                       "Adam is compiled first); its config passed Validate and its accelerate.yaml was written")
        ctx.phase(f"training: {' '.join(command[1:4])}")
        done = launch(command, self.timeout_s)
        progress = [e for e in _events(work / "run") if e["type"] == "progress"]
        if done.returncode != 0 or not progress:
            raise RuntimeError(f"the run exited {done.returncode}: {done.stderr[-1200:]}")
        mine = measured(progress, values["max_train_steps"])
        ctx.report(**mine)
        baseline = ctx.earlier.get(BASELINE, {})
        if self.backend and baseline.get("losses"):
            ctx.report(**compared(mine, baseline))
        elif self.backend:
            ctx.report(note=f"no losses of {BASELINE} to compare with")
        if self.resumes:
            ctx.phase("resuming the halfway training state")
            ctx.report(**self.resumed(values, work, mine["losses"], self.halfway(sizes)))

    def resumed(self, values: dict[str, Any], work: Path, losses: list[float], step: int) -> dict[str, Any]:
        """A second launch resumes the state saved at `step`: its losses against the uninterrupted run's."""
        from trainers.core.saves import save_name, state_name

        state = Path(values["output_dir"]) / state_name(save_name("finetune", step=step))
        again = {**values, "output_dir": str(work / "resumed-out"), "resume": str(state), "save_state": False}
        done = launch(self.command(again, work / "resumed"), self.timeout_s)
        after = [e["loss"] for e in _events(work / "resumed") if e["type"] == "progress"]
        if done.returncode != 0 or len(after) != len(losses) - step:
            raise RuntimeError(f"the resumed run exited {done.returncode} after {len(after)} steps: "
                               f"{done.stderr[-1200:]}")
        worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(after, losses[step:]))
        return {"resume_worst_rel_diff": worst, "resume_matches": worst <= RESUME_TOLERANCE}


def launch(command: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    """Run `command` in a process group of its own, ended whole (launcher and workers) when it outlasts timeout_s."""
    with subprocess.Popen(command, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as process:
        try:
            out, err = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            err += f"\n(ended after {timeout_s:.0f} s)"
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def resolution(sizes: Any) -> int:
    """256 px on a GPU (SD1.5's 512 halved: the parts time the backends, not the UNet), 64 in a dry run."""
    return 64 if sizes.tiny else sizes.resolution["sd15"] // 2


def measured(progress: list[dict], steps: int) -> dict[str, Any]:
    """Steps/s after the first two steps (warm-up), peak memory, the losses."""
    times = {e["step"]: e["time"] for e in progress}
    first = min(2, steps - 1)
    rate = (steps - first) / (times[steps] - times[first])
    losses = [e["loss"] for e in progress]
    return {"steps_per_s": round(rate, 4), "s_per_step": round(1 / rate, 4), "losses": losses,
            "loss_finite": all(math.isfinite(x) for x in losses),
            "peak_allocated_gb": max(e.get("peak_mem_gb") or 0.0 for e in progress)}


def compared(mine: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """The worst relative loss difference from the one-process run, and the speed and memory against it."""
    pairs = list(zip(mine["losses"], baseline["losses"]))
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in pairs)
    return {"loss_worst_rel_diff": worst,
            "losses_match": len(mine["losses"]) == len(baseline["losses"]) and worst <= LOSS_TOLERANCE,
            "speed_vs_one_process": round(mine["steps_per_s"] / baseline["steps_per_s"], 3),
            "memory_vs_one_process": round(mine["peak_allocated_gb"] / baseline["peak_allocated_gb"], 3)
            if baseline.get("peak_allocated_gb") else None}


def parts(sizes: Any) -> list[Any]:
    from benchmarks.gpu_runner import Part

    words = {BASELINE: "one plain process", "sharded-fsdp2": "FSDP2, one process",
             "sharded-zero2-offload": "DeepSpeed ZeRO-2, offload_optimizer, one process",
             "sharded-zero3": "DeepSpeed ZeRO-3, one process"}
    budgets = {BASELINE: 60, "sharded-fsdp2": 60, "sharded-zero2-offload": 150, "sharded-zero3": 180}
    resumes = {"sharded-zero3"}  # its states are checked here only: ZeRO-3 is refused on CPU processes
    return [Part(name, f"SD1.5 full finetune {resolution(sizes)} px, float32, {STEPS[sizes.tiny]} steps: {words[name]}"
                 + (", its halfway state resumed" if name in resumes else ""), budgets[name],
                 ShardedRun(name, backend, (budgets[name] - 10) / (2 if name in resumes else 1), name in resumes))
            for name, backend in BACKENDS.items()]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}


def _events(run_dir: Path) -> list[dict]:
    log = run_dir / "events.jsonl"
    if not log.is_file():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def main(argv: list[str]) -> None:
    """One launched process: the finetune of VALUES.json with random weights seeded alike in every part."""
    import torch

    from benchmarks.train_benchmark import bench_config, run_training

    values_file, run_dir = Path(argv[0]), Path(argv[1])
    torch.manual_seed(0)  # random_init draws the weights: the same ones in every part
    run_training(bench_config("finetune", json.loads(values_file.read_text(encoding="utf-8"))), run_dir,
                 random_init=True)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main(sys.argv[1:])
