"""What the parts of benchmarks/gpu_check.py measure: training runs through the real trainer (session, method, loop,
saving: benchmarks/train_benchmark.py's run_training) and rendering through the Generate job against a plain diffusers
pipeline on the same card.

A training part runs warm-up steps, timed steps and one last step whose FLOPs torch.utils.flop_counter counts (a
step hook enters the counter after the step before it), so the timed steps pay nothing for counting. Its rate is
taken from the run's own progress events (wall clock between the steps' ends), its memory from the allocator's
peaks (reset just before the first step), and its output is read back: a LoRA into the network that trained it
(every name and shape must match), a full model's UNet against the weights it trained.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.generate_benchmark import steady_images
from benchmarks.gpu_models import REPO, model_folder
from benchmarks.gpu_runner import PartContext, Skip
from benchmarks.train_benchmark import bench_config, run_training
from trainers.train.method import StepHook

if TYPE_CHECKING:
    from trainers.core.options import TrainConfig

PROMPT = "a photo of a cat sitting on a windowsill, golden hour"
NEGATIVE = "blurry"
CFG_SCALE = 7.0


@dataclass(frozen=True)
class Sizes:
    """What the check runs at: real sizes on a GPU, or tiny ones for --dry-run (the same code on a CPU)."""
    tiny: bool
    resolution: dict[str, int]  # per family
    warmup: int  # training steps before the timed ones
    timed: int  # training steps timed
    gen_steps: int  # denoising steps of a generated image
    gen_images: int  # images timed per generator (after one more for warm-up)
    flux_swap: int  # blocks_to_swap of the FLUX parts that swap
    flux_offload: float  # layer_offload_fraction of the FLUX part with an int8 base
    precision: str  # mixed_precision of the training parts (but for those with an option of NEED_BF16)
    clip: tuple[int, int, int]  # width, height and frames of the video parts' clips (and of their one window)
    swap_cap: int | None  # the most blocks_to_swap a part's preset may ask (a dry run's tiny models have 4 blocks)
    work: Path = Path("/tmp")
    peak_flops: float = float("nan")  # the card's bf16 peak (or the measured matmul rate): MFU's denominator
    diffusers_example: Path | None = None


REAL = dict(tiny=False, resolution={"sd15": 512, "sdxl": 1024, "flux": 512, "zimage": 1024, "qwen_image": 1024}, warmup=3, timed=10, gen_steps=20,
            gen_images=4, flux_swap=18, flux_offload=0.5, precision="bf16", clip=(832, 480, 49),
            swap_cap=None)
# A CPU has no bf16 arithmetic of its own: bf16 autocast there is 4-5x slower than fp32, so a dry run trains in fp32
# but for the parts whose options need bf16 (fp8 base, full_bf16).
DRY = dict(tiny=True, resolution={"sd15": 64, "sdxl": 64, "flux": 64, "zimage": 64, "qwen_image": 64}, warmup=1, timed=1, gen_steps=3,
           gen_images=1, flux_swap=2, flux_offload=0.25, precision="no", clip=(64, 64, 5),
           swap_cap=2)


@dataclass(frozen=True)
class TrainSpec:
    family: str
    method: str = "lora"
    batch: int = 1
    values: dict[str, Any] = field(default_factory=dict)  # options on top of the common ones
    video: bool = False  # trains on clips (Sizes.clip) rather than images


# Every training part: latents and text-encoder outputs cached before training (the steps then run the denoiser
# only, as users of sd-scripts' LoRA scripts usually run them), AdamW, no samples.
COMMON = {"cache_latents": True, "cache_text_encoder_outputs": True, "optimizer_type": "AdamW",
          "learning_rate": 1e-4, "max_data_loader_n_workers": 0, "seed": 0}
LORA = {"network_dim": 16, "network_alpha": 16, "network_train_unet_only": True}
NEED_BF16 = ("fp8_base", "full_bf16")  # options that need mixed_precision = 'bf16', also in a dry run
# A preset's sections that a part does not take: the parts' own optimizer (AdamW: bitsandbytes, which the 8-bit ones
# need, does not travel to the GPU machine), steps, samples and saves; its resolution is Sizes.resolution's.
PRESET_SKIPPED = ("optimizer", "sampling", "saving")


def preset_values(name: str) -> dict[str, Any]:
    """What a part trains with from presets/<name>.toml: its model, network, flow and precision options."""
    import tomllib

    preset = tomllib.loads((REPO / "presets" / f"{name}.toml").read_text(encoding="utf-8"))
    values = {key: value for section, table in preset.items() if isinstance(table, dict)
              and section not in PRESET_SKIPPED for key, value in table.items()}
    values.pop("resolution", None)
    return values


@dataclass(frozen=True)
class TrainRun:
    """A part that trains `spec` and reports rate, FLOPs, MFU, memory, losses and whether its output loads back."""
    spec: TrainSpec

    def config(self, sizes: Sizes, data: Path, output: Path) -> TrainConfig:
        """The run's options: the common ones, the method's, the spec's; warm-up, timed and counted steps. `data`
        is a folder of images, or a video part's dataset config."""
        spec = self.spec
        swap = spec.values.get("blocks_to_swap")
        swapped = {"blocks_to_swap": min(swap, sizes.swap_cap)} if swap and sizes.swap_cap is not None else {}
        dataset = ({"dataset_config": str(data)} if spec.video else
                   {"train_data_dir": str(data), "resolution": str(sizes.resolution[spec.family])})
        return bench_config(spec.method, {
            **COMMON, **(LORA if spec.method == "lora" else {}), **spec.values, **swapped, **dataset,
            "mixed_precision": "bf16" if any(spec.values.get(k) for k in NEED_BF16) else sizes.precision,
            "pretrained_model_name_or_path": str(model_folder(spec.family, sizes.work, sizes.tiny)),
            "output_dir": str(output), "train_batch_size": spec.batch,
            "max_train_steps": sizes.warmup + sizes.timed + 1})

    def dataset(self, sizes: Sizes, root: Path) -> Path:
        from trainers.demo import build_dataset

        if self.spec.video:
            return clip_dataset(root, *sizes.clip)
        return build_dataset(root, folder="100_bench", size=sizes.resolution[self.spec.family])

    def __call__(self, ctx: PartContext) -> None:
        spec, sizes = self.spec, ctx.settings
        started = time.time()
        ctx.phase("building the model and the dataset")
        work = sizes.work / f"train-{spec.family}-{spec.method}-{spec.batch}-{time.time_ns()}"
        cfg = self.config(sizes, self.dataset(sizes, work / "data"), work / "out")
        steps = cfg.max_train_steps  # the last one is counted, not timed
        flops, memory = StepFlops(steps), PeakMemory()

        def ready(session: Any, trainable: Any) -> None:
            trainable.hooks.append(flops)
            memory.reset(session.accelerator.device)
            ctx.report(setup_s=round(time.time() - started, 1))
            ctx.phase("training")

        session, trainable, final = run_training(cfg, work / "run", random_init=True, before_train=ready)
        progress = [e for e in _events(work / "run") if e["type"] == "progress"]
        rate = steady_rate(progress, sizes.warmup, steps - 1)
        losses = [e["loss"] for e in progress]
        ctx.report(**memory.peaks(session.accelerator.device), estimate_gb=estimated_gb(cfg, spec.family, sizes.tiny),
                   steps_per_s=round(rate, 4),
                   s_per_step=round(1 / rate, 4), images_per_s=round(rate * spec.batch, 4),
                   tflop_per_step=float(f"{flops.total / 1e12:.4g}"), mfu=round(flops.total * rate / sizes.peak_flops, 4),
                   loss_last=losses[-1], loss_finite=all(math.isfinite(x) for x in losses), steps=len(progress),
                   data_share=progress[-1].get("data_share"))
        ctx.phase("loading the saved output back")
        ctx.report(saved=str(final), **(lora_loads_back(trainable, final) if spec.method == "lora"
                                        else unet_loads_back(trainable, final)))


def clip_dataset(root: Path, width: int, height: int, frames: int, fps: float = 24.0) -> Path:
    """Two captioned clips of `frames` frames at width x height (a bright square crossing a gradient), as a
    musubi-tuner video dataset config taking one window of all their frames from each: the config's path."""
    import numpy as np

    from trainers.models.video import write_mp4

    clips = root / "clips"
    clips.mkdir(parents=True, exist_ok=True)
    ramp = np.linspace(40, 200, width, dtype=np.uint8)[None, None, :, None]
    for i, colour in enumerate(((230, 80, 60), (60, 120, 230))):
        video = np.broadcast_to(ramp, (frames, height, width, 3)).copy()
        side = max(height // 4, 2)
        for f in range(frames):
            x = (f * (width - side)) // max(frames - 1, 1)
            video[f, height // 2 - side // 2:height // 2 + side // 2, x:x + side] = colour
        write_mp4(video, clips / f"{i}.mp4", fps)
        (clips / f"{i}.txt").write_text(f"a {('red', 'blue')[i]} square moving right", encoding="utf-8")
    config = root / "dataset.toml"
    config.write_text(f'[general]\nresolution = [{width}, {height}]\n\n[[datasets]]\nvideo_directory = '
                      f'{json.dumps(str(clips))}\ntarget_frames = [{frames}]\nframe_extraction = "head"\n'
                      f"source_fps = {fps}\n", encoding="utf-8")
    return config


def estimated_gb(cfg: TrainConfig, family: str, tiny: bool) -> float | None:
    """What Validate's memory estimate (trainers/memory_estimate.py) says the run peaks at, in the unit of
    peak_allocated_gb (GiB): on a GPU its peak allocation, in a dry run the weights and states it holds in RAM. The
    real-size folders hold configs only, so there the family's published sizes stand in."""
    from trainers.memory_estimate import estimate_memory

    if tiny:
        estimate = estimate_memory(cfg, on_gpu=False)
        return round(estimate.host_gb * 1e9 / 2**30, 4) if estimate else None  # a tiny model: megabytes
    estimate = estimate_memory(cfg.replace(model_family=TRAINER_FAMILY.get(family, family)))
    return round(estimate.gpu_gb * 1e9 / 2**30, 2) if estimate else None


TRAINER_FAMILY = {"sd15": "sd1"}  # the check's model names that are not model_family values


class StepFlops(StepHook):
    """Counts the FLOPs of optimizer step `step` as executed (a gradient-checkpointed forward counts twice):
    torch's counter is entered after the step before it and left after this one."""

    def __init__(self, step: int) -> None:
        self.step, self.total, self._counter = step, 0, None

    def after_step(self, step: int) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        if step == self.step - 1:
            self._counter = FlopCounterMode(display=False)
            self._counter.__enter__()
        elif step == self.step and self._counter is not None:
            self._counter.__exit__(None, None, None)
            self.total = self._counter.get_total_flops()
            self._counter = None


class PeakMemory:
    """Peak memory from a reset on: the CUDA allocator's (allocated and reserved), or on a CPU the process's
    peak resident set (Linux lets a process reset it through /proc/self/clear_refs)."""

    def reset(self, device: Any) -> None:
        import torch

        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        else:
            Path("/proc/self/clear_refs").write_text("5")

    def peaks(self, device: Any) -> dict[str, Any]:
        import torch

        if device.type == "cuda":
            return {"peak_allocated_gb": round(torch.cuda.max_memory_allocated(device) / 2**30, 2),
                    "peak_reserved_gb": round(torch.cuda.max_memory_reserved(device) / 2**30, 2),
                    "memory_kind": "cuda"}
        status = Path("/proc/self/status").read_text().splitlines()
        rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
        return {"peak_allocated_gb": round(rss_kb / 2**20, 2), "peak_reserved_gb": None, "memory_kind": "host RSS"}


def steady_rate(progress: list[dict], first: int, last: int) -> float:
    """Steps per second between the ends of steps `first` and `last` (wall clock of the run's progress events)."""
    times = {e["step"]: e["time"] for e in progress}
    return (last - first) / (times[last] - times[first])


def lora_loads_back(trainable: Any, final: Path) -> dict[str, Any]:
    """The saved LoRA read back into the network that trained it: every module's names and shapes must match."""
    from trainers.methods.lora.file_format import read_lora_file

    tensors, metadata = read_lora_file(final)
    trainable.output.network.load_kohya_state_dict(tensors)  # raises naming what is missing or unexpected
    return {"saved_loads": True, "saved_mb": round(final.stat().st_size / 2**20, 1),
            "lora_layers": sum(k.endswith("lora_down.weight") for k in tensors)}


def unet_loads_back(trainable: Any, final: Path) -> dict[str, Any]:
    """The saved model's UNet holds every weight the run trained, each of its shape (safetensors headers only)."""
    from accelerate.utils import extract_model_from_parallel

    from trainers.core.fsio import read_safetensors_header

    files = sorted((final / "unet").glob("*.safetensors")) if final.is_dir() else [final]
    saved: dict[str, tuple[int, ...]] = {}
    for file in files:
        saved.update(read_safetensors_header(file)[0])
    trained = {k: tuple(v.shape) for k, v in extract_model_from_parallel(trainable.model.unet).state_dict().items()}
    missing = [k for k, shape in trained.items() if saved.get(k) != shape] if final.is_dir() else []
    size = sum(f.stat().st_size for f in final.rglob("*") if f.is_file()) if final.is_dir() else final.stat().st_size
    return {"saved_loads": bool(saved) and not missing, "saved_mb": round(size / 2**20, 1),
            **({"saved_missing": missing[:5]} if missing else {})}


def _events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()]


# ---- generation ------------------------------------------------------------------------------------------------

def generate_part(family: str, lora_from: str) -> Any:
    """Images/s at the family's size through Atelier's Generate job, then through a plain diffusers pipeline of the
    same components on the same device; then one image with the LoRA part `lora_from` saved, through Generate."""
    def run(ctx: PartContext) -> None:
        sizes: Sizes = ctx.settings
        folder = model_folder(family, sizes.work, sizes.tiny)
        work = sizes.work / f"generate-{family}-{time.time_ns()}"
        ctx.phase("rendering through Atelier's Generate job")
        ours = generate_job(folder, family, sizes, work / "job", images=sizes.gen_images + 1)
        ctx.report(atelier_images_per_s=round(ours, 4))
        ctx.phase("rendering through a plain diffusers pipeline")
        plain = diffusers_rate(folder, family, sizes, work / "diffusers")
        ctx.report(diffusers_images_per_s=round(plain, 4), atelier_vs_diffusers=round(ours / plain, 3))
        lora = ctx.earlier.get(lora_from, {}).get("saved")
        if lora:
            ctx.phase(f"rendering with the LoRA {lora_from} saved")
            generate_job(folder, family, sizes, work / "lora", images=1, loras=[lora])
            ctx.report(lora_renders=True)
        else:
            ctx.report(lora_renders=None, note=f"no LoRA from {lora_from} to render with")
    return run


def generate_job(folder: Path, family: str, sizes: Sizes, job_dir: Path, images: int,
                 loras: tuple[str, ...] | list[str] = ()) -> float:
    """Images/s of a Generate job (one worker, batch 1) after its first image: model loading and warm-up left out."""
    from trainers.generate.job import run_job
    from trainers.generate.options import GenerateConfig

    size = sizes.resolution[family]
    cfg = GenerateConfig({
        "model": str(folder), "random_init": True, "width": size, "height": size, "steps": sizes.gen_steps,
        "sampler": "euler_a", "cfg_scale": CFG_SCALE, "precision": "auto", "devices": "auto", "batch_size": 1,
        "prompts": [f"{PROMPT} --n {NEGATIVE}"], "images_per_prompt": images, "loras": list(loras)})
    run_job(cfg, job_dir)
    done, seconds = steady_images(job_dir, workers=1)
    return done / seconds if seconds else float("nan")


def diffusers_rate(folder: Path, family: str, sizes: Sizes, out: Path) -> float:
    """Images/s of diffusers' own pipeline for the model (the components loaded as Generate loads them, in its
    dtype), called as a user's script would: a prompt, a negative prompt, a seed; each image saved as a PNG."""
    import torch
    from diffusers import EulerAncestralDiscreteScheduler, StableDiffusionPipeline, StableDiffusionXLPipeline

    from trainers.generate.renderer import weight_dtype
    from trainers.models import load_model

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = weight_dtype("auto", device)
    model = load_model(str(folder), "auto", dtype, random_init=True)
    scheduler = EulerAncestralDiscreteScheduler.from_config(model.noise_scheduler.config)
    parts = dict(unet=model.unet, vae=model.vae, text_encoder=model.text_encoders[0],
                 tokenizer=model.tokenizers[0], scheduler=scheduler)
    if len(model.text_encoders) == 2:
        pipe = StableDiffusionXLPipeline(**parts, text_encoder_2=model.text_encoders[1],
                                         tokenizer_2=model.tokenizers[1])
    else:
        pipe = StableDiffusionPipeline(**parts, safety_checker=None, feature_extractor=None,
                                       requires_safety_checker=False)
    pipe.to(device, dtype)
    pipe.set_progress_bar_config(disable=True)
    size = sizes.resolution[family]
    out.mkdir(parents=True, exist_ok=True)
    times = []
    for seed in range(sizes.gen_images + 1):  # the first warms up
        image = pipe(PROMPT, negative_prompt=NEGATIVE, num_inference_steps=sizes.gen_steps, guidance_scale=CFG_SCALE,
                     width=size, height=size, generator=torch.Generator("cpu").manual_seed(seed)).images[0]
        image.save(out / f"{seed:03d}.png")
        times.append(time.perf_counter())
    return sizes.gen_images / (times[-1] - times[0])


# ---- side by side with the diffusers example -------------------------------------------------------------------

def side_by_side_part(ctx: PartContext) -> None:
    """benchmarks/side_by_side.py's SDXL workload (tiny on a CPU): Atelier and the diffusers SDXL LoRA example."""
    import importlib.util

    sizes: Sizes = ctx.settings
    script = sizes.diffusers_example
    if script is None or not script.is_file():
        raise Skip("no diffusers example given (--diffusers-example .../train_text_to_image_lora.py)")
    if importlib.util.find_spec("datasets") is None:
        raise Skip("the diffusers example needs the datasets package, which this python lacks")
    workload = "tiny" if sizes.tiny else "sdxl-1024"
    if workload != "tiny" and not (REPO.parent / "shared" / "arch").is_dir():
        raise Skip("benchmarks/side_by_side.py builds sdxl-1024 from ../shared/arch, which is not beside this "
                   "checkout")
    ctx.phase(f"side_by_side.py --workload {workload}")
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "side_by_side.py"), "--workload", workload,
                           "--rounds", "1", "--steps", str(max(12, sizes.warmup + sizes.timed)),
                           "--diffusers-example", str(script)], capture_output=True, text=True, cwd=REPO)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    for row in rows:
        key = row["trainer"].replace("-", "_")
        ctx.report(**{f"{key}_steps_per_s": row.get("steps_per_s"), f"{key}_peak_gpu_mb": row.get("peak_gpu_mb"),
                      **({f"{key}_error": row["error"]} if "error" in row else {})})
    if done.returncode != 0 or not rows:
        raise RuntimeError(f"side_by_side.py exited {done.returncode}: {done.stderr[-800:]}")

