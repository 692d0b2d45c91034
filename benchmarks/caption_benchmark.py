"""Captioning and masking rate (images/s) per captioner, each with its tiny model (trainers/caption/tiny.py).

    python benchmarks/caption_benchmark.py                         # CPU, 16 images of 256 px, batch 4
    python benchmarks/caption_benchmark.py --device cuda --images 64 --batch-size 16

Each captioner runs as a job runs it (trainers/caption/job.py: images read, the model, each caption written) over
the same folder, in this process, after a warm-up run; `job` is the job's own images/s over its last batches (wall
clock), `incl. load` the images over the whole run with the model's loading. The tiny models measure the job's own cost (reading, preprocessing, writing, generate's loop with a
model that costs almost nothing): a real model's rate is bound by the model, on a GPU by its size.
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
MASKERS = {"clipseg": {"prompt": "a thing"}, "background": {"method": "background", "trust_remote_code": True}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=16)
    p.add_argument("--size", type=int, default=256, help="image side in pixels")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--device", default="cpu")
    p.add_argument("--only", nargs="+", help="captioners (wd14, florence2, blip, joycaption, qwen2_5_vl) or maskers "
                   "(clipseg, background)")
    args = p.parse_args()

    import numpy as np
    from PIL import Image

    from trainers.caption.cli import _run
    from trainers.caption.options import config_from_values
    from trainers.caption.tiny import BUILDERS

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder = root / "data" / "1_thing"
        folder.mkdir(parents=True)
        rng = np.random.default_rng(0)
        for i in range(args.images):
            pixels = rng.integers(0, 255, (args.size, args.size, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"{i:03d}.png")
        for name, build in BUILDERS.items():
            if args.only and name not in args.only:
                continue
            model = build(root / "models" / name)
            verb = "masks" if name in MASKERS else "caption"
            values = {"images": str(root / "data"), "model": str(model), "device": args.device,
                      "batch_size": args.batch_size, "existing": "overwrite"}
            values |= MASKERS.get(name) or {"captioner": name, "max_new_tokens": args.max_new_tokens}
            cfg = config_from_values(verb, values)
            _run(cfg, root / f"warm-{name}", None)  # warm-up: first calls, caches
            started = time.perf_counter()
            _run(cfg, root / f"job-{name}", None)
            wall = time.perf_counter() - started
            events = [json.loads(line) for line in (root / f"job-{name}" / "events.jsonl").read_text().splitlines()]
            rate = [e for e in events if e["type"] == "images_progress"][-1].get("images_per_s")
            rows.append((name, rate, args.images / wall))
    print(f"{args.images} images of {args.size} px, batch {args.batch_size}, device {args.device}")
    print(f"{'captioner':<12} {'images/s (job)':>15} {'images/s (incl. load)':>22}")
    for name, rate, overall in rows:
        print(f"{name:<12} {rate or 0:>15.2f} {overall:>22.2f}")


if __name__ == "__main__":
    main()
