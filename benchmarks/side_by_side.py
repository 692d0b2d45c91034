"""Atelier against sd-scripts and the diffusers LoRA example on the same work, interleaved (A B C A B C ...).

    .venv/bin/python benchmarks/side_by_side.py --rounds 4
    .venv/bin/python benchmarks/side_by_side.py --sd-scripts ~/src/sd-scripts \\
        --diffusers-example ~/src/diffusers/examples/text_to_image/train_text_to_image_lora.py --rounds 4
    .venv/bin/python benchmarks/side_by_side.py --workload sd15-64 --steps 30   # compute-bound, real-size UNet
    .venv/bin/python benchmarks/side_by_side.py --workload sdxl-1024 --steps 30 ...  # on a CUDA GPU
    .venv/bin/python benchmarks/side_by_side.py --baseline /tmp/before   # A/B against an earlier Atelier checkout

Workloads (built in code, nothing fetched): `tiny` is a random-init SD1-style UNet (block_out_channels 32/64) on
8 images at 64 px, batch 2, fp32, LoRA rank 4 alpha 4 on the UNet only, AdamW 1e-4 constant, 60 steps, no
caching, no samples; `sd15-64` is the real-size SD1.5 architecture (random weights, ../shared/arch/sd15) at
64 px, batch 1, rank 8. Both run on the CPU. On a CUDA GPU, `sd15-512` and `sdxl-1024` train the real-size SD1.5
and SDXL architectures (../shared/arch/sdxl; the diffusers arm runs train_text_to_image_lora_sdxl.py from beside
the given example) at 512 and 1024 px, batch 1, rank 8, bf16 mixed precision; peak GPU memory
(torch.cuda.max_memory_allocated) is reported beside peak RSS. Each trainer runs as its users start it (`accelerate launch`); the other trainers run
only when their checkout is given (they need their own dependencies installed in the python given by --python;
sd-scripts' pins may need a python of their own: --sd-scripts-python). sd-scripts rebuilds every SD1 UNet as its
own module with SD1.5's channels and blocks written in as constants; for the tiny UNet it runs from a copy of the
checkout whose constants are the tiny UNet's (nothing else changed; the given checkout is left as it is).

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
    def _peak_gpu():
        import torch
        if torch.cuda.is_initialized():
            open(f"{_log}.gpu.{os.getpid()}", "w").write(str(torch.cuda.max_memory_allocated()))
    atexit.register(_peak_gpu)
'''


WORKLOADS = {  # the CPU workloads, and the GPU ones for a machine with a CUDA device
    "tiny": dict(resolution=64, batch=2, rank=4, alpha=4, precision="no", device="cpu", family="sd1"),
    "sd15-64": dict(resolution=64, batch=1, rank=8, alpha=8, precision="no", device="cpu", family="sd1"),
    "sd15-512": dict(resolution=512, batch=1, rank=8, alpha=8, precision="bf16", device="cuda", family="sd1"),
    "sdxl-1024": dict(resolution=1024, batch=1, rank=8, alpha=8, precision="bf16", device="cuda", family="sdxl"),
}
# sd-scripts loads these tokenizers from the hub unless its tokenizer_cache_dir has them
SD_SCRIPTS_TOKENIZERS = {"sd1": ["openai/clip-vit-large-patch14"],
                         "sdxl": ["openai/clip-vit-large-patch14", "laion/CLIP-ViT-bigG-14-laion2B-39B-b160k"]}


def build_workload(work: Path, name: str) -> tuple[Path, Path, Path, dict]:
    """(model folder, kohya data folder, imagefolder data for diffusers, settings)."""
    from trainers.demo import build_dataset

    settings = WORKLOADS[name]
    if name == "tiny":
        from trainers.models.sd.tiny import build_tiny_sd1

        model = build_tiny_sd1(work / "model")
    else:
        model = _real_size(work / "model", settings["family"])
    size = settings["resolution"]
    kohya = build_dataset(work / "data", folder="1_bench", size=size)
    for image in (kohya / "1_bench").glob("*.png"):  # square, as sd-scripts without buckets requires
        with Image.open(image) as img:
            square = img.crop((0, 0, size, size))
        square.save(image)
    imagefolder = work / "imagefolder"
    imagefolder.mkdir()
    rows = []
    for image in sorted((kohya / "1_bench").glob("*.png")):
        (imagefolder / image.name).write_bytes(image.read_bytes())
        rows.append(json.dumps({"file_name": image.name, "text": image.with_suffix(".txt").read_text()}))
    (imagefolder / "metadata.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    for hub_id in SD_SCRIPTS_TOKENIZERS[settings["family"]]:
        shutil.copytree(model / "tokenizer", work / "tokenizers" / hub_id.replace("/", "_"))
    return model, kohya, imagefolder, settings


def _real_size(folder: Path, family: str) -> Path:
    """The SD1.5 or SDXL architecture from its published configs (../shared/arch) with random weights, saved as a
    diffusers folder."""
    from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    from trainers.models.tiny import write_tiny_tokenizer

    arch = REPO.parent / "shared" / "arch" / ("sd15" if family == "sd1" else "sdxl")
    write_tiny_tokenizer(folder / "tokenizer")
    tokenizer = CLIPTokenizer.from_pretrained(folder / "tokenizer")
    parts = dict(unet=UNet2DConditionModel.from_config(UNet2DConditionModel.load_config(arch / "unet")),
                 vae=AutoencoderKL.from_config(AutoencoderKL.load_config(arch / "vae")),
                 text_encoder=CLIPTextModel(CLIPTextConfig.from_pretrained(arch / "text_encoder")),
                 tokenizer=tokenizer, scheduler=DDPMScheduler.from_pretrained(arch / "scheduler"))
    if family == "sd1":
        from diffusers import StableDiffusionPipeline

        pipe = StableDiffusionPipeline(**parts, safety_checker=None, feature_extractor=None,
                                       requires_safety_checker=False)
    else:
        from diffusers import StableDiffusionXLPipeline

        write_tiny_tokenizer(folder / "tokenizer_2")
        pipe = StableDiffusionXLPipeline(
            **parts, tokenizer_2=CLIPTokenizer.from_pretrained(folder / "tokenizer_2"),
            text_encoder_2=CLIPTextModelWithProjection(CLIPTextConfig.from_pretrained(arch / "text_encoder_2")))
    pipe.save_pretrained(folder)
    return folder


def atelier_argv(work: Path, model: Path, data: Path, s: dict, steps: int, python: str,
                 extra: list[str] = ()) -> list[str]:
    from trainers.core.launch import accelerate_command
    from trainers.core.options import load_config

    cfg = load_config("lora", overrides=[
        f"pretrained_model_name_or_path={json.dumps(str(model))}", f"train_data_dir={json.dumps(str(data))}",
        f"output_dir={json.dumps(str(work / 'out-atelier'))}", f"resolution='{s['resolution']}'",
        f"max_train_steps={steps}", f"train_batch_size={s['batch']}", f"mixed_precision='{s['precision']}'",
        "optimizer_type='AdamW'", "learning_rate=1e-4", "lr_scheduler='constant'", f"network_dim={s['rank']}",
        f"network_alpha={s['alpha']}", "network_train_unet_only=true", "max_data_loader_n_workers=0", "seed=0",
        "overwrite_output=true", *extra])
    config = work / "atelier.toml"
    cfg.save(config)
    return accelerate_command(cfg, config, work / "run-atelier", python=python)


def sd_scripts_for(checkout: Path, model: Path, work: Path, s: dict) -> Path:
    """`checkout` if its UNet module can hold `model`'s UNet, else a copy whose SD1.5 constants are the model's."""
    import re

    config = json.loads((model / "unet" / "config.json").read_text(encoding="utf-8"))
    if s["family"] != "sd1" or list(config["block_out_channels"]) == [320, 640, 1280, 1280]:
        return checkout
    copy = work / "sd-scripts"
    shutil.copytree(checkout, copy, ignore=shutil.ignore_patterns(".git", "images", "__pycache__"))
    module = copy / "library" / "original_unet.py"
    text = module.read_text(encoding="utf-8")
    for name, value in (("BLOCK_OUT_CHANNELS", tuple(config["block_out_channels"])),
                        ("DOWN_BLOCK_TYPES", list(config["down_block_types"])),
                        ("UP_BLOCK_TYPES", list(config["up_block_types"]))):
        text, found = re.subn(rf"^{name}(: [^=]+)? = .*$", f"{name} = {value!r}", text, count=1, flags=re.M)
        if not found:
            raise SystemExit(f"{module}: no `{name} = ...` line to set to the tiny UNet's; compare on sd15-64")
    module.write_text(text, encoding="utf-8")
    return copy


def sd_scripts_argv(checkout: Path, work: Path, model: Path, data: Path, s: dict, steps: int,
                    python: str) -> list[str]:
    script = "train_network.py" if s["family"] == "sd1" else "sdxl_train_network.py"
    return [*_launch(python, s), str(checkout / script), "--mixed_precision", s["precision"],
            "--pretrained_model_name_or_path", str(model),
            "--train_data_dir", str(data), "--resolution", str(s["resolution"]), "--output_dir",
            str(work / "out-sd-scripts"), "--network_module", "networks.lora", "--network_dim", str(s["rank"]),
            "--network_alpha", str(s["alpha"]), "--network_train_unet_only", "--optimizer_type", "AdamW",
            "--learning_rate", "1e-4", "--lr_scheduler", "constant", "--max_train_steps", str(steps),
            "--train_batch_size", str(s["batch"]), "--caption_extension", ".txt", "--sdpa",
            "--max_data_loader_n_workers", "0", "--save_model_as", "safetensors", "--seed", "0",
            "--tokenizer_cache_dir", str(work / "tokenizers")]


def diffusers_argv(script: Path, work: Path, model: Path, imagefolder: Path, s: dict, steps: int,
                   python: str) -> list[str]:
    return [*_launch(python, s), str(script), "--mixed_precision", s["precision"],
            "--pretrained_model_name_or_path", str(model), "--train_data_dir", str(imagefolder),
            "--caption_column", "text", "--resolution", str(s["resolution"]), "--train_batch_size", str(s["batch"]),
            "--max_train_steps", str(steps), "--learning_rate", "1e-4", "--lr_scheduler", "constant",
            "--lr_warmup_steps", "0", "--rank", str(s["rank"]), "--output_dir", str(work / "out-diffusers"),
            "--dataloader_num_workers", "0", "--seed", "0"]


def _launch(python: str, s: dict) -> list[str]:
    return [python, "-m", "accelerate.commands.launch", "--num_processes", "1", "--mixed_precision", s["precision"]]


def diffusers_script(example: Path, s: dict) -> Path:
    """The example for the workload's family: train_text_to_image_lora.py, or its _sdxl sibling."""
    return example if s["family"] == "sd1" else example.with_name(f"{example.stem}_sdxl.py")


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


def timed_run(name: str, argv: list[str], cwd: Path, work: Path, round_no: int, device: str,
              threads: int | None = None, code: Path = REPO) -> dict:
    log = work / f"steps-{name}-{round_no}"
    hook = work / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK, encoding="utf-8")
    env = {**os.environ, "BENCH_STEP_LOG": str(log), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(hook), str(code), os.environ.get("PYTHONPATH", "")])}
    if device == "cpu":
        env["ACCELERATE_USE_CPU"] = "1"
    if threads:  # accelerate launch takes a CPU process's threads from OMP_NUM_THREADS (else 1 per process)
        env["OMP_NUM_THREADS"] = str(threads)
    launched = time.time()
    done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        return {"trainer": name, "error": done.stderr[-600:]}
    stamps = sorted(float(t) for f in work.glob(f"{log.name}.[0-9]*") for t in f.read_text().split())
    rss = max((int(f.read_text() or 0) for f in work.glob(f"{log.name}.rss.*")), default=0)
    gpu = max((int(f.read_text() or 0) for f in work.glob(f"{log.name}.gpu.*")), default=0)
    window = stamps[9:]  # steps 10 to the end
    rate = (len(window) - 1) / (window[-1] - window[0]) if len(window) > 1 else float("nan")
    return {"trainer": name, "steps_per_s": rate, "first_step_s": stamps[0] - launched if stamps else float("nan"),
            "peak_rss_mb": rss / 2**20, "peak_gpu_mb": gpu / 2**20, "steps": len(stamps)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=tuple(WORKLOADS), default="tiny",
                        help="tiny and sd15-64 run on the CPU (fp32); sd15-512 and sdxl-1024 need a CUDA GPU (bf16)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--sd-scripts", type=Path, help="an sd-scripts checkout (its train_network.py)")
    parser.add_argument("--diffusers-example", type=Path, help="diffusers' train_text_to_image_lora.py (sdxl-1024 "
                                                               "runs train_text_to_image_lora_sdxl.py beside it)")
    parser.add_argument("--diffusers-kohya-targets", action="store_true",
                        help="give the diffusers example's LoRA the layers Atelier and sd-scripts train (a patched "
                             "copy beside the script), so each trainer does the same work per step")
    parser.add_argument("--atelier-set", action="append", default=[], metavar="NAME=VALUE",
                        help="an Atelier option on top of the workload's (A/B one setting, e.g. "
                             "num_cpu_threads_per_process=1)")
    parser.add_argument("--threads", type=int, help="CPU threads of every trainer (default: as each is launched: "
                                                    "accelerate launch gives a CPU process 1, Atelier the cores)")
    parser.add_argument("--baseline", type=Path, help="another Atelier checkout (e.g. `git worktree add /tmp/before "
                                                      "<commit>`), timed as one more arm: what a change bought")
    parser.add_argument("--python", default=sys.executable, help="the python the other trainers run with")
    parser.add_argument("--sd-scripts-python", help="sd-scripts' own python, where it needs other library versions "
                                                    "than the diffusers example (default: --python)")
    args = parser.parse_args()
    if WORKLOADS[args.workload]["device"] == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit(f"--workload {args.workload} needs a CUDA GPU; on this machine run tiny or sd15-64")
    work = Path(tempfile.mkdtemp(prefix="atelier-side-by-side-"))
    model, kohya, imagefolder, s = build_workload(work, args.workload)
    atelier_set = args.atelier_set + ([f"num_cpu_threads_per_process={args.threads}"] if args.threads else [])
    # (name, argv, working folder, the Atelier code on PYTHONPATH)
    arms = [("atelier", atelier_argv(work, model, kohya, s, args.steps, sys.executable, atelier_set), REPO, REPO)]
    if args.baseline:  # the same config and launch, run by the other checkout's code
        arms.append(("baseline", arms[0][1], args.baseline.resolve(), args.baseline.resolve()))
    if args.sd_scripts:
        checkout = sd_scripts_for(args.sd_scripts, model, work, s)
        arms.append(("sd-scripts", sd_scripts_argv(checkout, work, model, kohya, s, args.steps,
                                                    args.sd_scripts_python or args.python), checkout, REPO))
    if args.diffusers_example:
        script = diffusers_script(args.diffusers_example, s)
        script = with_kohya_targets(script) if args.diffusers_kohya_targets else script
        arms.append(("diffusers", diffusers_argv(script, work, model, imagefolder, s, args.steps,
                                                 args.python), args.diffusers_example.parent, REPO))
    results: dict[str, list[dict]] = {name: [] for name, *_ in arms}
    for round_no in range(args.rounds):
        for name, argv, cwd, code in arms:
            result = timed_run(name, argv, cwd, work, round_no, s["device"], args.threads, code)
            results[name].append(result)
            print(json.dumps({"round": round_no + 1, **result}), flush=True)
    print(f"\n{args.workload}: median of {args.rounds} interleaved rounds ({args.steps} steps, steps/s over 10-end)")
    ours = _median(results["atelier"], "steps_per_s")
    for name, rows in results.items():
        rate, first, rss, gpu = (_median(rows, k) for k in ("steps_per_s", "first_step_s", "peak_rss_mb",
                                                            "peak_gpu_mb"))
        ratio = f"atelier = {ours / rate:.2f}x" if name != "atelier" and rate == rate and rate else ""
        gpu_text = f"   peak GPU {gpu:6.0f} MB" if gpu == gpu and gpu else ""
        print(f"  {name:11s} {rate:6.2f} steps/s   launch->first step {first:5.1f} s   peak RSS {rss:6.0f} MB"
              f"{gpu_text}  {ratio}")
    return 0


def _median(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if key in r and r[key] == r[key]]
    return statistics.median(values) if values else float("nan")


if __name__ == "__main__":
    sys.exit(main())
