"""Train a LoRA on the tiny demo model with each optimizer and print one JSON line each: steps/s against AdamW.

    python benchmarks/optimizer_benchmark.py                         # every optimizer_type, 30 steps, CPU
    python benchmarks/optimizer_benchmark.py --optimizers AdamW,AdamW8bit,Prodigy --steps 50

The runs go through the real trainer (session, loop, LoRA network, data loader). A step hook clocks every step
from the second on (the first includes warm-up work); steps_per_s is from the median time of a step, which
bursts of other work on a shared machine change less than the mean. vs_adamw > 1: faster than AdamW.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trainers.train.method import StepHook  # noqa: E402 - after the path is set


class StepClock(StepHook):
    """The time at the end of every step."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def after_step(self, step: int) -> None:
        self.times.append(time.perf_counter())


def run_one(optimizer: str, model_dir: Path, data: Path, work: Path, args: argparse.Namespace) -> dict:
    """Train `args.steps` steps with `optimizer`; its step rate and times."""
    from trainers.core.optimizers import spec_for
    from trainers.core.options import load_config
    from trainers.methods.lora.trainer import METHOD
    from trainers.methods import method_memory_tips
    from trainers.preflight.validate import check, method_outputs
    from trainers.train.loop import train
    from trainers.train.session import start_session

    spec = spec_for(optimizer)
    lr = 1.0 if spec is not None and spec.adaptive else 1e-3
    cfg = load_config("lora", overrides=[
        f"pretrained_model_name_or_path={json.dumps(str(model_dir))}", f"train_data_dir={json.dumps(str(data))}",
        f"output_dir={json.dumps(str(work / 'out' / optimizer))}", f"resolution='{args.resolution}'",
        f"max_train_steps={args.steps}", f"train_batch_size={args.batch}", f"optimizer_type={json.dumps(optimizer)}",
        f"learning_rate={lr}", f"network_dim={args.network_dim}", "max_data_loader_n_workers=0",
        "save_precision='fp16'",
    ])
    check(cfg)  # as the trainer's entry does, before anything loads
    session = start_session(cfg, work / "runs" / optimizer, outputs=method_outputs, memory_tips=method_memory_tips)
    trainable = METHOD.make_trainable(cfg, session)
    clock = StepClock()
    trainable.hooks.append(clock)
    train(session, trainable)
    seconds = statistics.median(b - a for a, b in zip(clock.times, clock.times[1:]))
    return {"optimizer": optimizer, "steps": args.steps, "steps_per_s": round(1 / seconds, 3),
            "ms_per_step": round(seconds * 1000, 1)}


def main() -> None:
    from trainers.core.optimizers import OPTIMIZER_NAMES

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--optimizers", default=",".join([*OPTIMIZER_NAMES, "torch.optim.RMSprop"]),
                   help="comma-separated optimizer_type values (AdamW is always run first, as the reference)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--resolution", type=int, default=64)
    p.add_argument("--network-dim", type=int, default=16)
    args = p.parse_args()

    from trainers.demo import build_dataset
    from trainers.models.sd.tiny import build_tiny_sd1

    work = Path(tempfile.mkdtemp(prefix="atelier-optim-bench-"))
    model_dir = build_tiny_sd1(work / "model")
    data = build_dataset(work / "data", folder="100_bench", size=args.resolution)
    names = ["AdamW"] + [n.strip() for n in args.optimizers.split(",") if n.strip() and n.strip() != "AdamW"]
    reference = None
    for name in names:
        with contextlib.redirect_stdout(sys.stderr):  # the trainer's own report: stdout keeps the JSON lines only
            result = run_one(name, model_dir, data, work, args)
        reference = reference or result["steps_per_s"]
        result["vs_adamw"] = round(result["steps_per_s"] / reference, 3)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
