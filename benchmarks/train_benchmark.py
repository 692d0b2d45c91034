"""Train N LoRA steps and print one JSON line: it/s, images/s, peak memory, time to first step, data share.

    python benchmarks/train_benchmark.py --model tiny-sd1 --steps 20            # CPU, seconds
    python benchmarks/train_benchmark.py --model sd15 --resolution 512 --batch 4 --mixed-precision bf16
    python benchmarks/train_benchmark.py --model sdxl --resolution 1024 --gradient-checkpointing
    python benchmarks/train_benchmark.py --model sd15 --cache-latents --buckets   # data-loading share with cached latents

`sd15` and `sdxl` are real-size architectures with random weights, built from the published
configs in ../shared/arch (nothing is downloaded). The run goes through the real trainer
(session, loop, LoRA network, data loader), so the numbers are what users get.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
ARCH = REPO.parent / "shared" / "arch"

if TYPE_CHECKING:
    from trainers.core.options import TrainConfig
    from trainers.train.method import Trainable
    from trainers.train.session import Session


def main() -> None:
    started = time.time()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("tiny-sd1", "tiny-sdxl", "sd15", "sdxl"), default="tiny-sd1")
    p.add_argument("--arch-dir", type=Path, default=ARCH, help="folder with sd15/ and sdxl/ configs")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--resolution", type=int, default=None, help="default: 64 for tiny, 512 sd15, 1024 sdxl")
    p.add_argument("--mixed-precision", choices=("no", "fp16", "bf16"), default="no")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--optimizer", default="AdamW")
    p.add_argument("--network-dim", type=int, default=16)
    p.add_argument("--unet-only", action="store_true", help="train the UNet LoRA only")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--cache-latents", action="store_true", help="encode the images once before training")
    p.add_argument("--cache-text", action="store_true", help="cache text-encoder outputs (implies --unet-only)")
    p.add_argument("--buckets", action="store_true", help="aspect-ratio buckets (the demo images are 3 shapes)")
    args = p.parse_args()

    from trainers.demo import build_dataset

    work = Path(tempfile.mkdtemp(prefix="atelier-bench-"))
    if args.model.startswith("tiny"):
        from trainers.models.sd.tiny import build_tiny_sd1
        from trainers.models.sdxl.tiny import build_tiny_sdxl

        model_dir = (build_tiny_sd1 if args.model == "tiny-sd1" else build_tiny_sdxl)(work / "model")
        random_init = False
    else:
        model_dir, random_init = args.arch_dir / args.model, True
    resolution = args.resolution or {"sd15": 512, "sdxl": 1024}.get(args.model, 64)
    data = build_dataset(work / "data", folder="100_bench", size=resolution)
    cfg = bench_config("lora", {
        "pretrained_model_name_or_path": str(model_dir), "train_data_dir": str(data),
        "output_dir": str(work / "out"), "resolution": str(resolution), "max_train_steps": args.steps,
        "train_batch_size": args.batch, "mixed_precision": args.mixed_precision,
        "gradient_checkpointing": args.gradient_checkpointing, "optimizer_type": args.optimizer,
        "network_dim": args.network_dim, "network_train_unet_only": args.unet_only or args.cache_text,
        "max_data_loader_n_workers": args.workers, "save_precision": "fp16", "cache_latents": args.cache_latents,
        "cache_text_encoder_outputs": args.cache_text, "enable_bucket": args.buckets,
        "min_bucket_reso": min(256, resolution // 2)})
    marks: dict[str, float] = {}
    session, _, _ = run_training(cfg, work / "run", random_init,
                                 before_train=lambda *_: marks.setdefault("loaded", time.time()))
    events = [json.loads(line) for line in (work / "run" / "events.jsonl").read_text().splitlines()]
    progress = [e for e in events if e["type"] == "progress"]
    start = next(e for e in events if e["type"] == "start")
    last = progress[-1]
    print(json.dumps({
        "model": args.model, "resolution": resolution, "batch": args.batch, "mixed_precision": args.mixed_precision,
        "gradient_checkpointing": args.gradient_checkpointing, "optimizer": args.optimizer, "steps": args.steps,
        "cache_latents": args.cache_latents, "cache_text": args.cache_text, "buckets": args.buckets,
        "it_per_s": last["it_per_s"], "images_per_s": last["images_per_s"],
        "peak_mem_gb": last["peak_mem_gb"], "peak_mem_kind": last["peak_mem_kind"],
        "seconds_to_first_step": round(progress[0]["time"] - started, 2),
        "seconds_loading_model": round(marks["loaded"] - started, 2),
        "first_step_s": round(progress[0]["time"] - start["time"], 2),
        "data_share": last["data_share"],
        "device": str(session.accelerator.device),
    }))


def bench_config(method: str, values: dict[str, Any]) -> TrainConfig:
    """`method`'s config with `values` set, as `--set name=value` sets them."""
    from trainers.core.options import load_config

    return load_config(method, overrides=[f"{name}={json.dumps(value)}" for name, value in values.items()])


def run_training(cfg: TrainConfig, run_dir: Path, random_init: bool,
                 before_train: Callable[[Session, Trainable], None] | None = None) -> tuple[Session, Trainable, Path]:
    """A whole run of `cfg` in this process through the real trainer (session, method, loop): (session, what
    trained, the final output). `random_init` builds the model from its configs only; `before_train` runs once
    the model is set up, just before the first step."""
    from trainers.methods import method_memory_tips
    from trainers.preflight.validate import check, method_outputs
    from trainers.train.loop import train
    from trainers.train.method import method_of
    from trainers.train.session import start_session

    check(cfg)  # as the trainer's entry does, before anything loads
    session = start_session(cfg, run_dir, random_init=random_init, outputs=method_outputs,
                            memory_tips=method_memory_tips)
    trainable = method_of(cfg).make_trainable(cfg, session)
    if before_train is not None:
        before_train(session, trainable)
    return session, trainable, train(session, trainable)


if __name__ == "__main__":
    main()
