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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
ARCH = REPO.parent / "shared" / "arch"


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

    from trainers.core.options import load_config
    from trainers.demo import build_dataset
    from trainers.methods.lora.trainer import METHOD
    from trainers.train.loop import train
    from trainers.train.session import start_session

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
    cfg = load_config("lora", overrides=[
        f"pretrained_model_name_or_path={json.dumps(str(model_dir))}", f"train_data_dir={json.dumps(str(data))}",
        f"output_dir={json.dumps(str(work / 'out'))}", f"resolution='{resolution}'", f"max_train_steps={args.steps}",
        f"train_batch_size={args.batch}", f"mixed_precision='{args.mixed_precision}'",
        f"gradient_checkpointing={str(args.gradient_checkpointing).lower()}", f"optimizer_type='{args.optimizer}'",
        f"network_dim={args.network_dim}", f"network_train_unet_only={str(args.unet_only or args.cache_text).lower()}",
        f"max_data_loader_n_workers={args.workers}", "save_precision='fp16'",
        f"cache_latents={str(args.cache_latents).lower()}", f"cache_text_encoder_outputs={str(args.cache_text).lower()}",
        f"enable_bucket={str(args.buckets).lower()}", f"min_bucket_reso={min(256, resolution // 2)}",
    ])
    session = start_session(cfg, work / "run", random_init=random_init)
    loaded = time.time()
    train(session, METHOD.make_trainable(cfg, session))
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
        "seconds_loading_model": round(loaded - started, 2),
        "first_step_s": round(progress[0]["time"] - start["time"], 2),
        "data_share": last["data_share"],
        "device": str(session.accelerator.device),
    }))


if __name__ == "__main__":
    main()
