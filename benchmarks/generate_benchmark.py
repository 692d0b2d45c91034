"""Generate images through the real job (queue, workers, PNGs) and print one JSON line with images/s.

    python benchmarks/generate_benchmark.py --model tiny-sd1                          # CPU, seconds
    python benchmarks/generate_benchmark.py --model sd15 --resolution 512 --batch 1
    python benchmarks/generate_benchmark.py --model sd15 --resolution 512 --batch 4
    python benchmarks/generate_benchmark.py --model sdxl --resolution 1024 --batch 1
    python benchmarks/generate_benchmark.py --model sdxl --resolution 1024 --batch 4 --devices 0,1   # 2 GPUs

`sd15` and `sdxl` are real-size architectures with random weights, built from the published configs in
../shared/arch (nothing is downloaded). Every visible GPU gets a worker (`--devices auto`); the rate is
measured after each worker's first batch (model loading and warm-up excluded), over the whole job.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
ARCH = REPO.parent / "shared" / "arch"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("tiny-sd1", "tiny-sdxl", "sd15", "sdxl"), default="tiny-sd1")
    p.add_argument("--arch-dir", type=Path, default=ARCH, help="folder with sd15/ and sdxl/ configs")
    p.add_argument("--resolution", type=int, default=None, help="default: 64 for tiny, 512 sd15, 1024 sdxl")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--batches-per-worker", type=int, default=6, help="batches each worker renders (1 is warm-up)")
    p.add_argument("--sampler", default="euler_a")
    p.add_argument("--precision", choices=("auto", "fp32", "fp16", "bf16"), default="auto")
    p.add_argument("--devices", default="auto", help="auto (every GPU, else the CPU), cpu, or ids like 0,1")
    p.add_argument("--cpu-workers", type=int, default=1)
    p.add_argument("--cpu-threads", type=int, default=0, help="torch threads per CPU worker (0: cores / workers)")
    args = p.parse_args()

    from trainers.generate.job import run_job, worker_devices
    from trainers.generate.options import GenerateConfig

    work = Path(tempfile.mkdtemp(prefix="atelier-genbench-"))
    if args.model.startswith("tiny"):
        from trainers.models.sd.tiny import build_tiny_sd1
        from trainers.models.sdxl.tiny import build_tiny_sdxl

        model_dir, random_init = (build_tiny_sd1 if args.model == "tiny-sd1" else build_tiny_sdxl)(work / "model"), False
    else:
        model_dir, random_init = args.arch_dir / args.model, True
    size = args.resolution or {"sd15": 512, "sdxl": 1024}.get(args.model, 64)
    cfg = GenerateConfig({
        "model": str(model_dir), "random_init": random_init, "width": size, "height": size, "steps": args.steps,
        "sampler": args.sampler, "precision": args.precision, "devices": args.devices, "batch_size": args.batch,
        "num_workers": args.cpu_workers, "cpu_threads": args.cpu_threads, "prompts": ["a photo of a cat sitting on a windowsill, golden hour --n blurry"],
    })
    workers = len(worker_devices(cfg))
    cfg = cfg.replace(images_per_prompt=args.batch * args.batches_per_worker * workers)
    started = time.time()
    result = run_job(cfg, work / "job")
    images, elapsed = steady_images(work / "job", workers)
    import torch

    peak = max((torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count())), default=0) / 2**30
    print(json.dumps({
        "model": args.model, "resolution": size, "batch": args.batch, "steps": args.steps, "sampler": args.sampler,
        "precision": args.precision, "workers": workers,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "images": len(result.images), "images_per_s": round(images / elapsed, 4) if elapsed else None,
        "s_per_image": round(elapsed / images, 4) if images else None,
        "seconds_total": round(time.time() - started, 1),
        "peak_mem_gb_in_process": round(peak, 2), "job_dir": str(work / "job"),
    }))


def steady_images(job_dir: Path, workers: int) -> tuple[int, float]:
    """(images, seconds) of a finished job after each worker's first batch: model loading and warm-up left out."""
    events = [json.loads(line) for line in (job_dir / "events.jsonl").read_text().splitlines()]
    progress = [e for e in events if e["type"] == "generate_progress"]
    warm = progress[min(workers, len(progress)) - 1]  # each worker has rendered (about) one batch
    steady = [e for e in progress if e["time"] > warm["time"]]
    images = sum(e["done"] - prev["done"] for prev, e in zip([warm] + steady, steady))
    return images, steady[-1]["time"] - warm["time"] if steady else 0.0


if __name__ == "__main__":
    main()
