"""Atelier against sd-scripts and the diffusers LoRA example on the same work, interleaved (A B C A B C ...).

    .venv/bin/python benchmarks/side_by_side.py --rounds 4
    .venv/bin/python benchmarks/side_by_side.py --sd-scripts ~/src/sd-scripts \\
        --diffusers-example ~/src/diffusers/examples/text_to_image/train_text_to_image_lora.py --rounds 4
    .venv/bin/python benchmarks/side_by_side.py --workload sd15-64 --steps 30   # compute-bound, real-size UNet

Workloads (built in code, nothing fetched): `tiny` is a random-init SD1-style UNet (block_out_channels 32/64) on
8 images at 64 px, batch 2, fp32, LoRA rank 4 alpha 4 on the UNet only, AdamW 1e-4 constant, 60 steps, no
caching, no samples; `sd15-64` is the real-size SD1.5 architecture (random weights, ../shared/arch/sd15) at
64 px, batch 1, rank 8. Each trainer runs as its users start it (`accelerate launch`); the other trainers run
only when their checkout is given (they need their own dependencies installed in the python given by --python;
sd-scripts' pins may need a python of their own: --sd-scripts-python). sd-scripts cannot load the tiny UNet (it
rebuilds SD1 UNets with SD1.5's fixed channels): compare it on `sd15-64`.

As launched, `accelerate launch` gives a CPU process one thread and Atelier gives a CPU run the cores, and the
diffusers example trains attention layers only. `--threads N` and `--diffusers-kohya-targets` make the work equal.

Every trainer is timed the same way, from outside its code: a sitecustomize module on PYTHONPATH registers a
torch optimizer post-step hook that writes the wall time of each step, and records the process's peak RSS at
exit. Reported: steps/s over steps 10 to the end, launch -> first step, peak RSS, and each trainer's ratio to
Atelier.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HOOK = '''
import atexit, os, resource, time
_log = os.environ.get("BENCH_STEP_LOG")
if _log:  # every process of the run imports torch anyway (accelerate's launcher too)
    from torch.optim.optimizer import register_optimizer_step_post_hook
    _fh = open(f"{_log}.{os.getpid()}", "a")
    register_optimizer_step_post_hook(lambda *a, **k: (_fh.write(f"{time.time()}\\n"), _fh.flush()))
    def _peak_rss():  # this program's own peak: ru_maxrss would include the forking parent's (the benchmark's)
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    atexit.register(lambda: open(f"{_log}.rss.{os.getpid()}", "w").write(str(_peak_rss())))
'''


def build_workload(work: Path, name: str) -> tuple[Path, Path, Path, dict]:
    """(model folder, kohya data folder, imagefolder data for diffusers, settings)."""
    from trainers.demo import build_dataset

    settings = {"tiny": dict(resolution=64, batch=2, rank=4, alpha=4),
                "sd15-64": dict(resolution=64, batch=1, rank=8, alpha=8)}[name]
    if name == "tiny":
        from trainers.models.sd.tiny import build_tiny_sd1

        model = build_tiny_sd1(work / "model")
    else:
        model = _real_size_sd15(work / "model")
    kohya = build_dataset(work / "data", folder="1_bench", size=64)
    for image in (kohya / "1_bench").glob("*.png"):  # square, as sd-scripts without buckets requires
        with Image.open(image) as img:
            square = img.crop((0, 0, 64, 64))
        square.save(image)
    imagefolder = work / "imagefolder"
    imagefolder.mkdir()
    rows = []
    for image in sorted((kohya / "1_bench").glob("*.png")):
        (imagefolder / image.name).write_bytes(image.read_bytes())
        rows.append(json.dumps({"file_name": image.name, "text": image.with_suffix(".txt").read_text()}))
    (imagefolder / "metadata.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    # sd-scripts loads openai/clip-vit-large-patch14's tokenizer from the hub unless its tokenizer_cache_dir has it
    shutil.copytree(model / "tokenizer", work / "tokenizers" / "openai_clip-vit-large-patch14")
    return model, kohya, imagefolder, settings


def _real_size_sd15(folder: Path) -> Path:
    """The SD1.5 architecture from its published configs with random weights, saved as a diffusers folder."""
    from diffusers import AutoencoderKL, DDPMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    from trainers.models.tiny import write_tiny_tokenizer

    arch = REPO.parent / "shared" / "arch" / "sd15"
    unet = UNet2DConditionModel.from_config(UNet2DConditionModel.load_config(arch / "unet"))
    vae = AutoencoderKL.from_config(AutoencoderKL.load_config(arch / "vae"))
    text = CLIPTextModel(CLIPTextConfig.from_pretrained(arch / "text_encoder"))
    write_tiny_tokenizer(folder / "tokenizer")
    from transformers import CLIPTokenizer

    pipe = StableDiffusionPipeline(unet=unet, vae=vae, text_encoder=text, tokenizer=CLIPTokenizer.from_pretrained(
        folder / "tokenizer"), scheduler=DDPMScheduler.from_pretrained(arch / "scheduler"), safety_checker=None,
        feature_extractor=None, requires_safety_checker=False)
    pipe.save_pretrained(folder)
    return folder


def atelier_argv(work: Path, model: Path, data: Path, s: dict, steps: int, python: str,
                 extra: list[str] = ()) -> list[str]:
    from trainers.core.launch import accelerate_command
    from trainers.core.options import load_config

    cfg = load_config("lora", overrides=[
        f"pretrained_model_name_or_path={json.dumps(str(model))}", f"train_data_dir={json.dumps(str(data))}",
        f"output_dir={json.dumps(str(work / 'out-atelier'))}", f"resolution='{s['resolution']}'",
        f"max_train_steps={steps}", f"train_batch_size={s['batch']}", "mixed_precision='no'",
        "optimizer_type='AdamW'", "learning_rate=1e-4", "lr_scheduler='constant'", f"network_dim={s['rank']}",
        f"network_alpha={s['alpha']}", "network_train_unet_only=true", "max_data_loader_n_workers=0", "seed=0",
        "overwrite_output=true", *extra])
    config = work / "atelier.toml"
    cfg.save(config)
    return accelerate_command(cfg, config, work / "run-atelier", python=python)


def sd_scripts_argv(checkout: Path, work: Path, model: Path, data: Path, s: dict, steps: int,
                    python: str) -> list[str]:
    return [python, "-m", "accelerate.commands.launch", "--num_processes", "1", "--mixed_precision", "no",
            str(checkout / "train_network.py"), "--pretrained_model_name_or_path", str(model),
            "--train_data_dir", str(data), "--resolution", str(s["resolution"]), "--output_dir",
            str(work / "out-sd-scripts"), "--network_module", "networks.lora", "--network_dim", str(s["rank"]),
            "--network_alpha", str(s["alpha"]), "--network_train_unet_only", "--optimizer_type", "AdamW",
            "--learning_rate", "1e-4", "--lr_scheduler", "constant", "--max_train_steps", str(steps),
            "--train_batch_size", str(s["batch"]), "--caption_extension", ".txt", "--sdpa",
            "--max_data_loader_n_workers", "0", "--save_model_as", "safetensors", "--seed", "0",
            "--tokenizer_cache_dir", str(work / "tokenizers")]


def diffusers_argv(script: Path, work: Path, model: Path, imagefolder: Path, s: dict, steps: int,
                   python: str) -> list[str]:
    return [python, "-m", "accelerate.commands.launch", "--num_processes", "1", "--mixed_precision", "no",
            str(script), "--pretrained_model_name_or_path", str(model), "--train_data_dir", str(imagefolder),
            "--caption_column", "text", "--resolution", str(s["resolution"]), "--train_batch_size", str(s["batch"]),
            "--max_train_steps", str(steps), "--learning_rate", "1e-4", "--lr_scheduler", "constant",
            "--lr_warmup_steps", "0", "--rank", str(s["rank"]), "--output_dir", str(work / "out-diffusers"),
            "--dataloader_num_workers", "0", "--seed", "0"]


KOHYA_TARGETS = '["to_k", "to_q", "to_v", "to_out.0", "proj_in", "proj_out", "ff.net.0.proj", "ff.net.2"]'


def with_kohya_targets(script: Path) -> Path:
    """A copy of the diffusers example whose LoRA wraps the layers sd-scripts' and Atelier's UNet LoRA wraps (the
    example's own list is attention only: fewer, smaller layers, so less work per step)."""
    text = script.read_text(encoding="utf-8")
    attention_only = 'target_modules=["to_k", "to_q", "to_v", "to_out.0"]'
    if attention_only not in text:
        raise SystemExit(f"{script}: no `{attention_only}` line to widen; compare without --diffusers-kohya-targets")
    copy = script.parent / f"{script.stem}_kohya_targets.py"  # beside it: the example imports nothing relative
    copy.write_text(text.replace(attention_only, f"target_modules={KOHYA_TARGETS}"), encoding="utf-8")
    return copy


def timed_run(name: str, argv: list[str], cwd: Path, work: Path, round_no: int, threads: int | None = None) -> dict:
    log = work / f"steps-{name}-{round_no}"
    hook = work / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK, encoding="utf-8")
    env = {**os.environ, "BENCH_STEP_LOG": str(log), "HF_HUB_OFFLINE": "1", "ACCELERATE_USE_CPU": "1",
           "PYTHONPATH": os.pathsep.join([str(hook), str(REPO), os.environ.get("PYTHONPATH", "")])}
    if threads:  # accelerate launch takes a CPU process's threads from OMP_NUM_THREADS (else 1 per process)
        env["OMP_NUM_THREADS"] = str(threads)
    launched = time.time()
    done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        return {"trainer": name, "error": done.stderr[-600:]}
    stamps = sorted(float(t) for f in work.glob(f"{log.name}.[0-9]*") for t in f.read_text().split())
    rss = max((int(f.read_text() or 0) for f in work.glob(f"{log.name}.rss.*")), default=0)
    window = stamps[9:]  # steps 10 to the end
    rate = (len(window) - 1) / (window[-1] - window[0]) if len(window) > 1 else float("nan")
    return {"trainer": name, "steps_per_s": rate, "first_step_s": stamps[0] - launched if stamps else float("nan"),
            "peak_rss_mb": rss / 2**20, "steps": len(stamps)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=("tiny", "sd15-64"), default="tiny")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--sd-scripts", type=Path, help="an sd-scripts checkout (its train_network.py)")
    parser.add_argument("--diffusers-example", type=Path, help="diffusers' train_text_to_image_lora.py")
    parser.add_argument("--diffusers-kohya-targets", action="store_true",
                        help="give the diffusers example's LoRA the layers Atelier and sd-scripts train (a patched "
                             "copy beside the script), so each trainer does the same work per step")
    parser.add_argument("--atelier-set", action="append", default=[], metavar="NAME=VALUE",
                        help="an Atelier option on top of the workload's (A/B one setting, e.g. "
                             "num_cpu_threads_per_process=1)")
    parser.add_argument("--threads", type=int, help="CPU threads of every trainer (default: as each is launched: "
                                                    "accelerate launch gives a CPU process 1, Atelier the cores)")
    parser.add_argument("--python", default=sys.executable, help="the python the other trainers run with")
    parser.add_argument("--sd-scripts-python", help="sd-scripts' own python, where it needs other library versions "
                                                    "than the diffusers example (default: --python)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="atelier-side-by-side-"))
    model, kohya, imagefolder, s = build_workload(work, args.workload)
    atelier_set = args.atelier_set + ([f"num_cpu_threads_per_process={args.threads}"] if args.threads else [])
    arms = [("atelier", atelier_argv(work, model, kohya, s, args.steps, sys.executable, atelier_set), REPO)]
    if args.sd_scripts:
        arms.append(("sd-scripts", sd_scripts_argv(args.sd_scripts, work, model, kohya, s, args.steps,
                                                    args.sd_scripts_python or args.python),
                     args.sd_scripts))
    if args.diffusers_example:
        script = with_kohya_targets(args.diffusers_example) if args.diffusers_kohya_targets else \
            args.diffusers_example
        arms.append(("diffusers", diffusers_argv(script, work, model, imagefolder, s, args.steps,
                                                 args.python), args.diffusers_example.parent))
    results: dict[str, list[dict]] = {name: [] for name, _, _ in arms}
    for round_no in range(args.rounds):
        for name, argv, cwd in arms:
            result = timed_run(name, argv, cwd, work, round_no, args.threads)
            results[name].append(result)
            print(json.dumps({"round": round_no + 1, **result}), flush=True)
    print(f"\n{args.workload}: median of {args.rounds} interleaved rounds ({args.steps} steps, steps/s over 10-end)")
    ours = _median(results["atelier"], "steps_per_s")
    for name, rows in results.items():
        rate, first, rss = (_median(rows, k) for k in ("steps_per_s", "first_step_s", "peak_rss_mb"))
        ratio = f"atelier = {ours / rate:.2f}x" if name != "atelier" and rate == rate and rate else ""
        print(f"  {name:11s} {rate:6.2f} steps/s   launch->first step {first:5.1f} s   peak RSS {rss:6.0f} MB  {ratio}")
    return 0


def _median(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if key in r and r[key] == r[key]]
    return statistics.median(values) if values else float("nan")


if __name__ == "__main__":
    sys.exit(main())
