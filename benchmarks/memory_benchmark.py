"""The memory estimate against what runs really hold, for a table of configs.

    python benchmarks/memory_benchmark.py [--model FOLDER] [--steps 2] [--work DIR]

Each config trains `--steps` steps through the real trainer (`python -m trainers <method>`, a process of its own), and
the run's status.json gives both numbers (trainers/train/memory_watch.py): the estimate Validate shows
(trainers/memory_estimate.py) and the measured peak: torch.cuda.max_memory_allocated on a GPU, on a CPU the peak
resident memory from the first step on above what the process held before the model loaded. On a CPU the estimate's
whole (host) total is compared, activations included; they are small here (latents 8x8, batch 1).

Without --model it builds a 109 M-parameter SD1-shaped model (the tiny pipeline with a wider UNet) so the weights,
gradients and optimizer states are large enough to measure on a CPU. Real-size figures on a GPU come from
benchmarks/gpu_check.py, whose training parts report `estimate_gb` beside `peak_allocated_gb` (docs/memory.md).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# (method, what, options): what each changes is one part of the estimate
CONFIGS: tuple[tuple[str, str, dict], ...] = (
    ("finetune", "full finetune, AdamW (float32 weights, gradients, 2 moments)", {"optimizer_type": "AdamW"}),
    ("finetune", "full finetune, SGD (no optimizer states)", {"optimizer_type": "SGD"}),
    ("lora", "LoRA dim 64, AdamW, float32 base", {"network_dim": 64, "network_alpha": 64}),
    ("lora", "LoRA dim 64, AdamW, int8 base", {"network_dim": 64, "network_alpha": 64, "base_model_precision": "int8"}),
    ("lora", "LoRA dim 64, AdamW, nf4 base", {"network_dim": 64, "network_alpha": 64, "base_model_precision": "nf4"}),
)


def build_medium_sd1(folder: Path) -> Path:
    """The tiny SD1 pipeline with a 109 M-parameter UNet and latents 8 times smaller than the image: the weights,
    gradients and optimizer states dwarf the activations."""
    import shutil

    import torch
    from diffusers import UNet2DConditionModel

    from trainers.models.sd.tiny import build_tiny_sd1
    from trainers.models.tiny import tiny_vae

    build_tiny_sd1(folder, vae=tiny_vae(4))
    shutil.rmtree(folder / "unet")
    torch.manual_seed(0)
    UNet2DConditionModel(sample_size=8, block_out_channels=(320, 640), layers_per_block=2,
                         down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                         up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
                         attention_head_dim=8, norm_num_groups=32).save_pretrained(folder / "unet")
    return folder


def measure(method: str, options: dict, model: Path, data: Path, work: Path, steps: int) -> dict:
    """Train `steps` steps; the run's estimate and measured peak (GB) from its status.json."""
    run = work / f"run-{len(list(work.glob('run-*')))}"
    values = {"pretrained_model_name_or_path": str(model), "train_data_dir": str(data), "output_dir": str(run / "out"),
              "max_train_steps": steps, "resolution": "64", "train_batch_size": 1, "max_data_loader_n_workers": 0,
              "learning_rate": 1e-5, "save_precision": "float", **options}
    overrides = [arg for key, value in values.items() for arg in ("--set", f"{key}={json.dumps(value)}")]
    done = subprocess.run([sys.executable, "-m", "trainers", method, "--run-dir", str(run), *overrides], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    status = json.loads((run / "status.json").read_text(encoding="utf-8")) if (run / "status.json").exists() else {}
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return {"estimate_gb": status.get("memory_estimate_gb"), "measured_gb": status.get("memory_peak_gb"),
            "kind": status.get("memory_peak_kind")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="a local diffusers model folder (default: the 109 M SD1 model)")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path(tempfile.mkdtemp(prefix="memory-benchmark-")))
    args = parser.parse_args()
    from trainers.demo import build_dataset

    model = args.model or build_medium_sd1(args.work / "model")
    data = build_dataset(args.work / "data")
    print("| config | estimated GB | measured GB | measured / estimated | measured as |")
    print("|---|---|---|---|---|")
    for method, what, options in CONFIGS:
        row = measure(method, options, model, data, args.work, args.steps)
        if "error" in row:
            print(f"| {what} | | | | failed: {row['error']} |", flush=True)
            continue
        ratio = row["measured_gb"] / row["estimate_gb"] if row["estimate_gb"] else float("nan")
        print(f"| {what} | {row['estimate_gb']:.3f} | {row['measured_gb']:.3f} | {ratio:.2f} | {row['kind']} |",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
