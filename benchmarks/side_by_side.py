"""Atelier against sd-scripts and the diffusers LoRA example, interleaved (A B C A B C ...), as launched or on the
same work (--fair).

    .venv/bin/python benchmarks/side_by_side.py --rounds 4
    .venv/bin/python benchmarks/side_by_side.py --sd-scripts ~/src/sd-scripts \\
        --diffusers-example ~/src/diffusers/examples/text_to_image/train_text_to_image_lora.py --rounds 4
    .venv/bin/python benchmarks/side_by_side.py --fair --sd-scripts ... --diffusers-example ...   # the same work
    .venv/bin/python benchmarks/side_by_side.py --workload sd15-64 --steps 30   # compute-bound, real-size UNet
    .venv/bin/python benchmarks/side_by_side.py --workload sdxl-1024 --steps 30 ...  # on a CUDA GPU
    .venv/bin/python benchmarks/side_by_side.py --baseline /tmp/before   # A/B against an earlier Atelier checkout
    .venv/bin/python benchmarks/side_by_side.py --fair --speed-arms   # compile_blocks and fused_optimizer on/off

Workloads (built in code, nothing fetched): `tiny` is a random-init SD1-style UNet (block_out_channels 32/64) on
8 images at 64 px, batch 2, fp32, LoRA rank 4 alpha 4 on the UNet only, AdamW 1e-4 constant, 60 steps, no
samples; `sd15-64` is the real-size SD1.5 architecture (random weights, ../shared/arch/sd15) at
64 px, batch 1, rank 8. Both run on the CPU. On a CUDA GPU, `sd15-512` and `sdxl-1024` train the real-size SD1.5
and SDXL architectures (../shared/arch/sdxl; the diffusers arm runs train_text_to_image_lora_sdxl.py from beside
the given example) at 512 and 1024 px, batch 1, rank 8, bf16 mixed precision; peak GPU memory
(torch.cuda.max_memory_allocated) is reported beside peak RSS. Each trainer runs as its users start it
(`accelerate launch`); the other trainers run only when their checkout is given (they need their own dependencies
installed in the python given by --python; sd-scripts' pins need a python of their own: --sd-scripts-python;
benchmarks/peer_envs.sh builds both). sd-scripts rebuilds every SD1 UNet as its own module with SD1.5's channels
and blocks written in as constants; for the tiny UNet it runs from a copy of the checkout whose constants are the
tiny UNet's (nothing else changed; the given checkout is left as it is).

As launched, the work differs: `accelerate launch` gives a CPU process one thread and Atelier gives a CPU run the
cores; the diffusers example trains attention layers only; nothing caches latents, but from the second epoch on
Atelier takes each image's latent distribution and each caption's encoding from its memos (train/memo.py) while
the others run their VAE and text encoder every step. `--fair` makes the work the same wherever a trainer can do
it: latents cached before training by sd-scripts (--cache_latents) and Atelier (cache_latents = true), text
encoders run every step (sd-scripts caches no SD1 text-encoder outputs; Atelier memoize_encoders = false), every
trainer on the same threads, the diffusers example on the layers the others wrap. The example cannot cache
latents, so it is compared with a second Atelier arm that encodes every step as well (`atelier-uncached`).

Every trainer is timed and counted the same way, from outside its code: a sitecustomize module on PYTHONPATH
registers a torch optimizer post-step hook that writes the wall time of each step (and torch's thread count at the
first), a global module forward hook that logs the rows through the VAE's encoder and the text encoders, and
records the process's peak RSS at exit. Reported: steps/s over steps 10 to the end, launch -> first step, peak RSS,
each trainer's ratio to its Atelier arm, marked "same work" only when the counted work agrees, and a line per arm
with what it computed in each timed step: images through the VAE, captions through the text encoder, threads, and
the LoRA layers of the file it saved (benchmarks/step_work.py).
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
from dataclasses import asdict, dataclass
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.step_work import StepWork, step_work  # noqa: E402 (after the path)

HOOK = """
import atexit, os, resource, time
_log = os.environ.get("BENCH_STEP_LOG")
if _log:  # every process of the run imports torch anyway (accelerate's launcher too)
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook
    _fh = open(f"{_log}.{os.getpid()}", "a")
    def _step(*_):
        if _fh.tell() == 0:  # the threads the step ran with, as the trainer set them up
            open(f"{_log}.threads.{os.getpid()}", "w").write(str(torch.get_num_threads()))
        _fh.write(f"{time.time()}\\n")
        _fh.flush()
    register_optimizer_step_post_hook(_step)
    # Rows through the frozen encoders, whatever calls them: the VAE's encoder (diffusers' Encoder, inside
    # AutoencoderKL.encode) and the CLIP/T5 text encoders (transformers' top-level classes). A memo hit or a cached
    # latent calls neither. (A global hook costs each module call ~2 us: under 0.2% of a tiny step.)
    _kinds = {"Encoder": "vae", "CLIPTextModel": "text", "CLIPTextModelWithProjection": "text",
              "T5EncoderModel": "text"}
    _enc = open(f"{_log}.enc.{os.getpid()}", "a")
    def _encoded(module, args, kwargs, output):
        kind = _kinds.get(type(module).__name__)
        if kind and (kind == "text" or "autoencoder" in type(module).__module__):
            first = args[0] if args else next(iter(kwargs.values()), None)
            rows = first.shape[0] if isinstance(first, torch.Tensor) else 0
            _enc.write(f"{kind} {id(module)} {rows} {time.time()}\\n")
            _enc.flush()
    torch.nn.modules.module.register_module_forward_hook(_encoded, with_kwargs=True)
    def _peak_rss():  # this program's own peak: ru_maxrss would include the forking parent's (the benchmark's)
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    atexit.register(lambda: open(f"{_log}.rss.{os.getpid()}", "w").write(str(_peak_rss())))
    def _peak_gpu():
        if torch.cuda.is_initialized():
            open(f"{_log}.gpu.{os.getpid()}", "w").write(str(torch.cuda.max_memory_allocated()))
    atexit.register(_peak_gpu)
"""


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


def atelier_argv(work: Path, name: str, model: Path, data: Path, s: dict, steps: int, python: str,
                 extra: list[str] = ()) -> list[str]:
    """The argv of Atelier arm `name` (its config, run and output folders named after it)."""
    from trainers.core.launch import accelerate_command
    from trainers.core.options import load_config

    cfg = load_config("lora", overrides=[
        f"pretrained_model_name_or_path={json.dumps(str(model))}", f"train_data_dir={json.dumps(str(data))}",
        f"output_dir={json.dumps(str(work / f'out-{name}'))}", f"resolution='{s['resolution']}'",
        f"max_train_steps={steps}", f"train_batch_size={s['batch']}", f"mixed_precision='{s['precision']}'",
        "optimizer_type='AdamW'", "learning_rate=1e-4", "lr_scheduler='constant'", f"network_dim={s['rank']}",
        f"network_alpha={s['alpha']}", "network_train_unet_only=true", "max_data_loader_n_workers=0", "seed=0",
        "overwrite_output=true", *extra])
    config = work / f"{name}.toml"
    cfg.save(config)
    return accelerate_command(cfg, config, work / f"run-{name}", python=python)


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
                    python: str, cache_latents: bool = False) -> list[str]:
    script = "train_network.py" if s["family"] == "sd1" else "sdxl_train_network.py"
    return [*_launch(python, s), str(checkout / script), "--mixed_precision", s["precision"],
            "--pretrained_model_name_or_path", str(model),
            "--train_data_dir", str(data), "--resolution", str(s["resolution"]), "--output_dir",
            str(work / "out-sd-scripts"), "--network_module", "networks.lora", "--network_dim", str(s["rank"]),
            "--network_alpha", str(s["alpha"]), "--network_train_unet_only", "--optimizer_type", "AdamW",
            "--learning_rate", "1e-4", "--lr_scheduler", "constant", "--max_train_steps", str(steps),
            "--train_batch_size", str(s["batch"]), "--caption_extension", ".txt", "--sdpa",
            "--max_data_loader_n_workers", "0", "--save_model_as", "safetensors", "--seed", "0",
            "--tokenizer_cache_dir", str(work / "tokenizers"), *(["--cache_latents"] if cache_latents else [])]


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


@dataclass
class Arm:
    """One trainer as the benchmark runs it."""
    name: str
    argv: list[str]
    cwd: Path
    output: Path  # its output folder: the LoRA whose layers are counted
    code: Path = REPO  # the Atelier code on PYTHONPATH
    same_work_as: str = "atelier"  # the Atelier arm its ratio is taken against
    note: str = ""  # what it cannot do that the others do


def timed_run(arm: Arm, work: Path, round_no: int, device: str, threads: int | None = None) -> dict:
    log = work / f"steps-{arm.name}-{round_no}"
    hook = work / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK, encoding="utf-8")
    env = {**os.environ, "BENCH_STEP_LOG": str(log), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(hook), str(arm.code), os.environ.get("PYTHONPATH", "")])}
    if device == "cpu":
        env["ACCELERATE_USE_CPU"] = "1"
    if threads:  # accelerate launch takes a CPU process's threads from OMP_NUM_THREADS (else 1 per process)
        env["OMP_NUM_THREADS"] = str(threads)
    launched = time.time()
    done = subprocess.run(arm.argv, cwd=arm.cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    if done.returncode != 0:
        return {"trainer": arm.name, "error": done.stderr[-600:]}
    stamps = sorted(float(t) for f in work.glob(f"{log.name}.[0-9]*") for t in f.read_text().split())
    rss = max((int(f.read_text() or 0) for f in work.glob(f"{log.name}.rss.*")), default=0)
    gpu = max((int(f.read_text() or 0) for f in work.glob(f"{log.name}.gpu.*")), default=0)
    window = stamps[9:]  # steps 10 to the end
    rate = (len(window) - 1) / (window[-1] - window[0]) if len(window) > 1 else float("nan")
    return {"trainer": arm.name, "steps_per_s": rate,
            "first_step_s": stamps[0] - launched if stamps else float("nan"),
            "peak_rss_mb": rss / 2**20, "peak_gpu_mb": gpu / 2**20, "steps": len(stamps),
            **asdict(step_work(log, window, arm.output))}


# --fair: the Atelier settings that do what sd-scripts does with --cache_latents (a latent cached per image before
# training; its text encoder runs every step: sd-scripts caches no SD1 text-encoder outputs), and what the diffusers
# example does (it cannot cache latents: its VAE and text encoder run every step)
FAIR_CACHED = ["cache_latents=true", "memoize_encoders=false"]
FAIR_UNCACHED = ["cache_latents=false", "memoize_encoders=false"]


def build_arms(args: argparse.Namespace, work: Path, model: Path, kohya: Path, imagefolder: Path,
               s: dict) -> list[Arm]:
    threads = [f"num_cpu_threads_per_process={args.threads}"] if args.threads else []
    ours = [*(FAIR_CACHED if args.fair else []), *args.atelier_set, *threads]

    def atelier(name: str, settings: list[str]) -> list[str]:
        return atelier_argv(work, name, model, kohya, s, args.steps, sys.executable, settings)

    arms = [Arm("atelier", atelier("atelier", ours), REPO, work / "out-atelier")]
    if args.baseline:  # the same config and launch, run by the other checkout's code
        baseline = args.baseline.resolve()
        arms.append(Arm("baseline", arms[0].argv, baseline, work / "out-atelier", code=baseline))
    if args.speed_arms:  # the same config and work, one speed setting flipped (CPU defaults: not compiled, fused)
        for name, flip in (("atelier-compiled", "compile_blocks=on"), ("atelier-unfused", "fused_optimizer=off")):
            arms.append(Arm(name, atelier(name, [*ours, flip]), REPO, work / f"out-{name}", note=f"{name}: {flip}"))
    if args.sd_scripts:
        checkout = sd_scripts_for(args.sd_scripts, model, work, s)
        arms.append(Arm("sd-scripts", sd_scripts_argv(checkout, work, model, kohya, s, args.steps,
                                                      args.sd_scripts_python or args.python, args.fair),
                        checkout, work / "out-sd-scripts"))
    if args.diffusers_example:
        script = diffusers_script(args.diffusers_example, s)
        script = with_kohya_targets(script) if args.diffusers_kohya_targets else script
        peer = "atelier"
        if args.fair:  # its same work on our side: every step encodes
            peer = "atelier-uncached"
            arms.append(Arm(peer, atelier(peer, [*FAIR_UNCACHED, *args.atelier_set, *threads]), REPO,
                            work / f"out-{peer}", same_work_as=peer))
        arms.append(Arm("diffusers", diffusers_argv(script, work, model, imagefolder, s, args.steps, args.python),
                        args.diffusers_example.parent, work / "out-diffusers", same_work_as=peer,
                        note="the diffusers example cannot cache latents (its VAE encodes every step)"
                        + (f": compared with {peer}, Atelier with {' '.join(FAIR_UNCACHED)}" if args.fair else "")))
    return arms


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
    parser.add_argument("--speed-arms", action="store_true",
                        help="two more Atelier arms on the same work: compile_blocks=on (atelier-compiled) and "
                             "fused_optimizer=off (atelier-unfused), each against the atelier arm (on the CPU: "
                             "blocks not compiled, AdamW fused)")
    parser.add_argument("--python", default=sys.executable, help="the python the other trainers run with")
    parser.add_argument("--sd-scripts-python", help="sd-scripts' own python, where it needs other library versions "
                                                    "than the diffusers example (default: --python)")
    parser.add_argument("--fair", action="store_true",
                        help="the same work on every side that can do it: latents cached (sd-scripts "
                             "--cache_latents, Atelier cache_latents = true), text encoders run every step (Atelier "
                             "memoize_encoders = false; --atelier-set memoize_encoders=true turns its text memo back "
                             "on), every trainer on --threads (default: the cores), the diffusers example on the "
                             "layers the others wrap; the diffusers example cannot cache latents, so it is compared "
                             "with one more Atelier arm that encodes every step too (atelier-uncached)")
    args = parser.parse_args()
    if args.fair:
        args.threads = args.threads or len(os.sched_getaffinity(0))
        args.diffusers_kohya_targets = True
    if WORKLOADS[args.workload]["device"] == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit(f"--workload {args.workload} needs a CUDA GPU; on this machine run tiny or sd15-64")
    work = Path(tempfile.mkdtemp(prefix="atelier-side-by-side-"))
    model, kohya, imagefolder, s = build_workload(work, args.workload)
    arms = build_arms(args, work, model, kohya, imagefolder, s)
    results: dict[str, list[dict]] = {arm.name: [] for arm in arms}
    for round_no in range(args.rounds):
        for arm in arms:
            result = timed_run(arm, work, round_no, s["device"], args.threads)
            results[arm.name].append(result)
            print(json.dumps({"round": round_no + 1, **result}), flush=True)
    mode = "fair (same work where a trainer can do it)" if args.fair else "as launched"
    print(f"\n{args.workload}, {mode}: median of {args.rounds} interleaved rounds ({args.steps} steps, steps/s over "
          "10-end)")
    report(arms, results)
    return 0


def report(arms: list[Arm], results: dict[str, list[dict]]) -> None:
    """Each arm's medians and its ratio to its Atelier arm, then what each computed per step (counted)."""
    works = {arm.name: _work(results[arm.name]) for arm in arms}
    for arm in arms:
        rows = results[arm.name]
        rate, first, rss, gpu = (_median(rows, k) for k in ("steps_per_s", "first_step_s", "peak_rss_mb",
                                                            "peak_gpu_mb"))
        ratio = ""
        if arm.name != arm.same_work_as and rate == rate and rate:
            ours, theirs = works[arm.same_work_as], works[arm.name]
            differ = ours.differences(theirs) if ours and theirs else ["not counted"]
            ratio = (f"{arm.same_work_as} = {_median(results[arm.same_work_as], 'steps_per_s') / rate:.2f}x, "
                     + (f"NOT the same work ({'; '.join(differ)})" if differ else "same work"))
        gpu_text = f"   peak GPU {gpu:6.0f} MB" if gpu == gpu and gpu else ""
        print(f"  {arm.name:16s} {rate:6.2f} steps/s   launch->first step {first:5.1f} s   peak RSS {rss:6.0f} MB"
              f"{gpu_text}  {ratio}")
    print("\nper step, steps 11-end (counted from outside each trainer):")
    for arm in arms:
        work = works[arm.name]
        print(f"  {arm.name:16s} {work.describe() if work else 'no successful run'}")
    for arm in arms:
        if arm.note:
            print(f"  note: {arm.note}")


def _work(rows: list[dict]) -> StepWork | None:
    """The work of the arm's last run that trained (the same each round)."""
    done = [r for r in rows if "error" not in r]
    return StepWork(**{k: done[-1][k] for k in StepWork.__dataclass_fields__}) if done else None


def _median(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if key in r and r[key] == r[key]]
    return statistics.median(values) if values else float("nan")


if __name__ == "__main__":
    sys.exit(main())
