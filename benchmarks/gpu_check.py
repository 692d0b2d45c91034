"""One prepared GPU check: real-size training and generation speed, memory and correctness in one call.

    python3 benchmarks/gpu_check.py --out OUT                  # on a CUDA GPU (under 8 minutes on one H100)
    .venv/bin/python benchmarks/gpu_check.py --dry-run --out /tmp/gpu-dry   # the same code on a CPU, tiny models
    .venv/bin/python benchmarks/gpu_check.py --report OUT/gpu_check.json --write-docs   # its table into the docs

First the environment: the packages the trainers import (missing ones are named: carry them as wheels, see
benchmarks/gpu_prepare.sh), CUDA visible to this python's torch, free disk, the card's bf16 peak. Then the parts,
each in a process of its own under a time budget (a part that fails or runs long is reported with what it had
measured, and the others still run): LoRA training of SD1.5 at 512 px and SDXL at 1024 px (batch 1 and 4), an SDXL
full finetune, FLUX.1-dev LoRAs at 512 px (bf16 or fp8 base, with or without blocks_to_swap), Z-Image and Qwen-Image
LoRAs at 1024 px with their 24 GB presets' options, and images/s at 20
steps of SD1.5 512 and SDXL 1024 through Atelier's Generate job against a plain diffusers pipeline; then, in calls
of their own (--only): a Wan 2.2 TI2V 5B LoRA on 49-frame clips at 832x480 (`wan22-ti2v-lora`: s/step and peak
memory for docs/video.md) and the sharded runs (`sharded`). Real-size
architectures with random weights (benchmarks/gpu_models.py; nothing is downloaded), trained through the real
trainer. Each training part reports steps/s after warm-up, peak memory (allocated and reserved), the FLOPs of one
step (counted by torch) and MFU against the card's bf16 peak, whether every loss was finite, and whether the saved
LoRA (or model) loads back. Writes gpu_check.json and gpu_check.md into --out.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.gpu_runner import Part, PartContext, run_part, run_parts  # noqa: E402 (after the path)

DOC = REPO / "docs" / "performance.md"
BEGIN, END = "<!-- gpu-check:begin -->", "<!-- gpu-check:end -->"
TOTAL_S = 420  # the parts' share of the 8 minutes: imports, the environment and the wheels take the rest
SHARDED, SHARDED_GROUP = "sharded-", "sharded"  # the DeepSpeed and FSDP2 parts (benchmarks/gpu_sharded.py)
DRY_BUDGET_S = 600  # a part's budget on a CPU (tiny models, but a busy 2-core machine)
# Packages the parts import (distribution names); the others pinned in requirements.txt are listed, not required.
REQUIRED = ("torch", "diffusers", "transformers", "accelerate", "safetensors", "peft", "tomlkit", "numpy", "pillow",
            "tqdm", "huggingface_hub", "tokenizers")
MIN_FREE_GB = 15  # the SDXL finetune saves a 7 GB model
# Dense bf16 tensor-core peaks (TFLOP/s, from the vendors' data sheets), matched against torch's device name
# in order; an unlisted card is measured (a large bf16 matrix product) instead.
BF16_PEAK_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.4), ("H200", 989.4),
                    ("GH200", 989.4), ("B200", 2250.0), ("A100", 312.0), ("L40S", 362.1), ("RTX 4090", 165.2),
                    ("RTX 3090", 71.0), ("A10G", 70.0))


def parts(sizes: Any) -> list[Part]:
    """Every part, in the order they run: the compass figures first, so a short run still gives them."""
    from benchmarks.gpu_parts import TrainRun, TrainSpec, generate_part, preset_values, side_by_side_part
    from benchmarks.gpu_sharded import parts as sharded_parts

    swap = {"blocks_to_swap": sizes.flux_swap}
    checkpointed = {"gradient_checkpointing": True}
    flux = [("bf16", {}), ("fp8", {"fp8_base": True}), ("bf16-swap", swap), ("fp8-swap", {"fp8_base": True, **swap})]
    res, (w, h, frames) = sizes.resolution, sizes.clip
    flux_parts = [Part(f"flux-lora-{mode}", f"FLUX.1-dev LoRA {res['flux']} px, {_flux_words(values, sizes)}, "
                       "gradient checkpointing", 100, TrainRun(TrainSpec("flux", values={**checkpointed, **values})))
                  for mode, values in flux]
    # issue 42's order of value: SDXL at batch 4 (s/it, MFU), peak memory against the estimate for FLUX, Z-Image and
    # Qwen-Image (within the first 420 s), then SDXL at batch 1 and Generate, then the rest
    return [
        Part("sdxl-lora-bs4", f"SDXL LoRA {res['sdxl']} px, batch 4, gradient checkpointing", 75,
             TrainRun(TrainSpec("sdxl", batch=4, values=checkpointed))),
        flux_parts[0],
        Part("zimage-lora-24gb", f"Z-Image LoRA {res['zimage']} px with zimage_lora_24gb's options (bf16, rank 32, "
             "gradient checkpointing; AdamW)", 100,
             TrainRun(TrainSpec("zimage", values=preset_values("zimage_lora_24gb")))),
        Part("qwen-image-lora-24gb", f"Qwen-Image LoRA {res['qwen_image']} px with qwen_image_lora_24gb's options (fp8 "
             "base, blocks_to_swap 16, rank 16, gradient checkpointing; AdamW)", 145,
             TrainRun(TrainSpec("qwen_image", values=preset_values("qwen_image_lora_24gb")))),
        Part("sdxl-lora-bs1", f"SDXL LoRA {res['sdxl']} px, batch 1, gradient checkpointing", 75,
             TrainRun(TrainSpec("sdxl", values=checkpointed))),
        Part("generate-sdxl", f"SDXL {res['sdxl']} px, {sizes.gen_steps} steps, batch 1: Generate vs diffusers", 75,
             generate_part("sdxl", lora_from="sdxl-lora-bs1")),
        *flux_parts[1:],
        Part("sdxl-lora-bs1-compiled", f"SDXL LoRA {res['sdxl']} px, batch 1, gradient checkpointing, compile_blocks "
             "on: against sdxl-lora-bs1 (not compiled: auto is off until this part shows it faster)", 75,
             TrainRun(TrainSpec("sdxl", values={**checkpointed, "compile_blocks": "on"}))),
        Part("sd15-lora-bs1", f"SD1.5 LoRA {res['sd15']} px, batch 1", 45, TrainRun(TrainSpec("sd15"))),
        Part("sd15-lora-bs4", f"SD1.5 LoRA {res['sd15']} px, batch 4", 45, TrainRun(TrainSpec("sd15", batch=4))),
        Part("generate-sd15", f"SD1.5 {res['sd15']} px, {sizes.gen_steps} steps, batch 1: Generate vs diffusers", 45,
             generate_part("sd15", lora_from="sd15-lora-bs1")),
        Part("sdxl-finetune", f"SDXL full finetune {res['sdxl']} px, batch 1, full_bf16, gradient checkpointing",
             100, TrainRun(TrainSpec("sdxl", method="finetune", values={**checkpointed, "full_bf16": True,
                                                                          "learning_rate": 1e-6}))),
        Part("flux-lora-int8-offload", f"FLUX.1-dev LoRA {res['flux']} px, int8 base, layer_offload_fraction "
             f"{sizes.flux_offload}, gradient checkpointing", 100,
             TrainRun(TrainSpec("flux", values={**checkpointed, "base_model_precision": "int8",
                                                "layer_offload_fraction": sizes.flux_offload}))),
        Part("side-by-side", "benchmarks/side_by_side.py sdxl-1024: Atelier vs the diffusers SDXL LoRA example", 120,
             side_by_side_part),
        # past the 420 s of a whole run: run it with --only wan22-ti2v-lora (a call of its own)
        Part("wan22-ti2v-lora", f"Wan 2.2 TI2V 5B LoRA {w}x{h}, {frames}-frame clips, gradient checkpointing",
             150, TrainRun(TrainSpec("wan22_ti2v", values=checkpointed, video=True))),
        *sharded_parts(sizes),  # past the 420 s of a whole run: run them with --only sharded (a call of their own)
    ]


def _flux_words(values: dict[str, Any], sizes: Any) -> str:
    base = "fp8 base" if values.get("fp8_base") else f"{'bf16' if sizes.precision == 'bf16' else 'fp32'} base"
    return f"{base}, blocks_to_swap {values['blocks_to_swap']}" if values.get("blocks_to_swap") else base


# ---- the environment -------------------------------------------------------------------------------------------

def pins() -> dict[str, str]:
    """requirements.txt's pins, {distribution: version}."""
    found = {}
    for line in (REPO / "requirements.txt").read_text(encoding="utf-8").splitlines():
        if match := re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line.strip()):
            found[match[1].lower()] = match[2]
    return found


def packages() -> dict[str, dict[str, str | None]]:
    """Each pinned package (and the required ones): {name: {"installed": version or None, "pinned": version}}."""
    pinned = pins()
    listed = {}
    for name in dict.fromkeys([*REQUIRED, *pinned]):
        try:
            installed: str | None = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        listed[name] = {"installed": installed, "pinned": pinned.get(name)}
    return listed


def missing_required(listed: dict[str, dict[str, str | None]]) -> list[str]:
    return [name for name in REQUIRED if listed[name]["installed"] is None]


def environment(ctx: PartContext) -> None:
    """CUDA, the card, the disk and the bf16 rate (in a child: the parent never initialises CUDA)."""
    import torch

    sizes = ctx.settings
    cuda = torch.cuda.is_available()
    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                            "torch_cuda": torch.version.cuda, "cuda_available": cuda,
                            "disk_free_gb": round(shutil.disk_usage(sizes.work).free / 2**30, 1),
                            "cpu_count": os.cpu_count()}
    problems = []
    if cuda:
        props = torch.cuda.get_device_properties(0)
        info.update(device=torch.cuda.get_device_name(0), gpu_memory_gb=round(props.total_memory / 2**30, 1),
                    capability=f"{props.major}.{props.minor}", gpu_count=torch.cuda.device_count(),
                    bf16_supported=torch.cuda.is_bf16_supported())
    else:
        info["device"] = f"cpu ({platform.processor() or platform.machine()})"
        if torch.version.cuda is None:
            problems.append(f"this python's torch {torch.__version__} is a CPU build (no CUDA)")
        else:
            problems.append("torch has CUDA but sees no GPU (CUDA_VISIBLE_DEVICES? the driver?)")
    if not sizes.tiny and info["disk_free_gb"] < MIN_FREE_GB:  # only the finetune's save needs it: say so, go on
        info["note"] = (f"{info['disk_free_gb']} GB free in {sizes.work}: the SDXL finetune's save needs about 7 GB "
                        f"(give --work a folder with {MIN_FREE_GB} GB)")
    ctx.report(**info)
    measured = matmul_tflops(torch.device("cuda" if cuda else "cpu"), 8192 if cuda else 512)
    listed = next((tflops for key, tflops in BF16_PEAK_TFLOPS if key in info["device"]), None)
    ctx.report(matmul_bf16_tflops=round(measured, 4), peak_bf16_tflops=listed or round(measured, 4),
               peak_source="data sheet (dense bf16)" if listed else "measured (bf16 matrix product)")
    if problems and not sizes.tiny:
        raise RuntimeError("; ".join(problems) + " (run --dry-run to check the script on a CPU)")
    if problems:
        ctx.report(note="; ".join(problems) + ": dry run on the CPU")


def matmul_tflops(device: Any, n: int) -> float:
    """bf16 matrix products of n x n x n: the rate this device reaches on the simplest work."""
    import torch

    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    started, reps = time.perf_counter(), 10
    for _ in range(reps):
        a @ b
    sync()
    return 2 * n**3 * reps / (time.perf_counter() - started) / 1e12


def preload() -> None:
    """The heavy imports, once, before the parts are forked (each child then starts at once)."""
    import torch  # noqa: F401
    import diffusers  # noqa: F401
    import transformers  # noqa: F401

    import benchmarks.gpu_parts  # noqa: F401 - the trainers, the loop, the Generate job
    import trainers.generate.job  # noqa: F401
    import trainers.methods.finetune.trainer  # noqa: F401
    import trainers.methods.lora.trainer  # noqa: F401
    import trainers.train.loop  # noqa: F401


# ---- the report ------------------------------------------------------------------------------------------------

def _num(value: Any, digits: int = 2, scale: float = 1.0, suffix: str = "") -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "–"
    return f"{value * scale:.{digits}f}{suffix}"


def _sig(value: Any) -> str:
    """Three significant digits (a dry run's TFLOP/step are thousandths, a GPU run's tens)."""
    return f"{value:.3g}" if isinstance(value, (int, float)) and math.isfinite(value) else "–"


def _yes(value: Any) -> str:
    return {True: "yes", False: "**NO**"}.get(value, "–")


def _status(part: dict) -> str:
    note = part.get("error", "").splitlines()[0] if part.get("error") else part.get("note", "")
    return f"{part['status']}: {note}" if note else part["status"]


def markdown(result: dict) -> str:
    """The check's results as markdown: the compass figures, then a table per kind of part."""
    env = result["environment"]
    partz = {p["name"]: p for p in result["parts"]}
    lines = [f"{'Dry run (CPU, tiny models)' if result['dry_run'] else 'GPU check'} of {result['date']} on "
             f"**{env.get('device', '?')}**: torch {env.get('torch')} (CUDA {env.get('torch_cuda')}), python "
             f"{env.get('python')}, commit {result.get('commit') or 'unknown'}; {result['total_s']:.0f} s in all. "
             f"MFU is against {_num(env.get('peak_bf16_tflops'), 3)} TFLOP/s ({env.get('peak_source', '?')}); a "
             f"{'512' if result['dry_run'] else '8192'}-wide bf16 matrix product ran at "
             f"{_num(env.get('matmul_bf16_tflops'), 3)} TFLOP/s."
             + (" Memory is each part's peak resident set (no GPU)." if result["dry_run"] else ""), ""]
    sdxl, sdxl4 = partz.get("sdxl-lora-bs1", {}), partz.get("sdxl-lora-bs4", {})
    flux = [(name.removeprefix("flux-lora-"), p) for name, p in partz.items() if name.startswith("flux-lora-")]
    estimated = [p for p in result["parts"] if "estimate_gb" in p and "peak_allocated_gb" in p]
    lines += [f"- **{sdxl4.get('what', 'SDXL LoRA, batch 4')}**: {_num(sdxl4.get('s_per_step'))} s/it, MFU "
              f"{_num(sdxl4.get('mfu'), 1, 100, ' %')}",
              f"- **{sdxl.get('what', 'SDXL LoRA')}**: {_num(sdxl.get('s_per_step'))} s/it "
              f"({_num(sdxl.get('steps_per_s'))} it/s), MFU {_num(sdxl.get('mfu'), 1, 100, ' %')} "
              "(anchor: 1.1-1.45 s/it at 1024 px on 3090/4090-class cards)",
              "- **Peak memory allocated against the estimate**: "
              + (", ".join(f"{p['name']} {_num(p.get('peak_allocated_gb'), 1)} / {_num(p.get('estimate_gb'), 1)} GB"
                           for p in estimated) or "–"),
              "- **FLUX.1 LoRA, peak memory allocated**: "
              + ", ".join(f"{mode} {_num(p.get('peak_allocated_gb'), 1, suffix=' GB')} "
                          f"({_num(p.get('steps_per_s'))} it/s)" for mode, p in flux)
              + " (anchor: SimpleTuner ~1.4 it/s at 512 px on a 4090 in 9 GB)", ""]
    lines += ["| part | what | s/it | it/s | images/s | peak allocated GB | estimated GB | peak reserved GB | TFLOP/step "
              "| MFU | losses finite | saved loads back | setup s | status |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in result["parts"]:
        if "lora" in p["name"] or "finetune" in p["name"]:
            lines.append(f"| {p['name']} | {p['what']} | {_num(p.get('s_per_step'), 3)} | {_num(p.get('steps_per_s'))} "
                         f"| {_num(p.get('images_per_s'))} | {_num(p.get('peak_allocated_gb'))} "
                         f"| {_num(p.get('estimate_gb'))} | {_num(p.get('peak_reserved_gb'))} | {_sig(p.get('tflop_per_step'))} "
                         f"| {_num(p.get('mfu'), 1, 100, ' %')} | {_yes(p.get('loss_finite'))} "
                         f"| {_yes(p.get('saved_loads'))} | {_num(p.get('setup_s'), 0)} | {_status(p)} |")
    lines += ["", "| part | what | Generate images/s | diffusers images/s | Generate / diffusers "
              "| trained LoRA renders | status |", "|---|---|---|---|---|---|---|"]
    for p in result["parts"]:
        if p["name"].startswith("generate-"):
            lines.append(f"| {p['name']} | {p['what']} | {_num(p.get('atelier_images_per_s'), 3)} "
                         f"| {_num(p.get('diffusers_images_per_s'), 3)} | {_num(p.get('atelier_vs_diffusers'))} "
                         f"| {_yes(p.get('lora_renders'))} | {_status(p)} |")
    sharded = [p for p in result["parts"] if p["name"].startswith(SHARDED)]
    if sharded:
        lines += ["", "| part | what | s/it | speed vs one process | peak allocated GB | memory vs one process "
                  "| worst loss difference | losses match one process | resumed state matches | status |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
    for p in sharded:
        lines.append(f"| {p['name']} | {p['what']} | {_num(p.get('s_per_step'), 3)} "
                     f"| {_num(p.get('speed_vs_one_process'))} | {_num(p.get('peak_allocated_gb'))} "
                     f"| {_num(p.get('memory_vs_one_process'))} | {_sig(p.get('loss_worst_rel_diff'))} "
                     f"| {_yes(p.get('losses_match'))} | {_yes(p.get('resume_matches'))} | {_status(p)} |")
    others = [p for p in result["parts"] if p["name"] == "side-by-side"]
    for p in others:
        rates = ", ".join(f"{k.removesuffix('_steps_per_s')} {_num(v)} steps/s" for k, v in p.items()
                          if k.endswith("_steps_per_s"))
        lines += ["", f"Side by side ({p['what']}): {rates or 'no rates'}; {_status(p)}."]
    return "\n".join(lines) + "\n"


def write_docs(text: str, doc: Path = DOC) -> None:
    """Put `text` between the GPU section's markers in `doc` (the section and its markers are added if missing)."""
    current = doc.read_text(encoding="utf-8")
    block = f"{BEGIN}\n{text}{END}"
    if BEGIN in current and END in current:
        head, rest = current.split(BEGIN, 1)
        updated = head + block + rest.split(END, 1)[1]
    else:
        updated = current.rstrip("\n") + f"\n\n## GPU\n\n{block}\n"
    doc.write_text(updated, encoding="utf-8")


def commit() -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def save(result: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    (out / "gpu_check.md").write_text(markdown(result), encoding="utf-8")


# ---- the command -----------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="folder for gpu_check.json and gpu_check.md")
    parser.add_argument("--dry-run", action="store_true", help="tiny models on the CPU: checks the script itself")
    parser.add_argument("--only", action="append", default=[], metavar="PART", help="run only this part (again "
                        f"for more; '{SHARDED_GROUP}': every {SHARDED}* part); --list names them")
    parser.add_argument("--list", action="store_true", help="name the parts and their budgets, and stop")
    parser.add_argument("--total-s", type=float, help=f"time for all the parts (default {TOTAL_S} s; a dry run "
                        "has no limit)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()), help="where the datasets, runs "
                        "and saves go (removed at the end)")
    parser.add_argument("--diffusers-example", type=Path, help="diffusers' train_text_to_image_lora.py: the "
                        "side-by-side part runs its _sdxl sibling (it needs the datasets package)")
    parser.add_argument("--report", type=Path, metavar="JSON", help="render a gpu_check.json again (no run)")
    parser.add_argument("--write-docs", action="store_true", help=f"put the table into {DOC.relative_to(REPO)}'s "
                        "GPU section")
    args = parser.parse_args(argv)
    if args.report:
        result = json.loads(args.report.read_text(encoding="utf-8"))
        print(markdown(result), end="")
        if args.write_docs:
            write_docs(markdown(result))
        return 0
    if not args.out and not args.list:
        parser.error("--out is needed (or --report JSON, or --list)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded; a GPU machine may reach no network
    # The parent forks every part and must leave CUDA untouched: an is_available() there (an import's) would
    # initialise the driver, which a forked child cannot use; NVML's check does not.
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the parts are forked
    started = time.monotonic()
    result: dict[str, Any] = {"tool": "benchmarks/gpu_check.py", "dry_run": args.dry_run, "commit": commit(),
                              "date": datetime.datetime.now().isoformat(timespec="seconds"),
                              "environment": {"packages": packages()}, "parts": [], "total_s": 0.0}
    if missing := missing_required(result["environment"]["packages"]):  # before any of them is imported
        result["environment"]["error"] = (f"missing packages: {', '.join(missing)}; carry them as wheels "
                                          "(bash benchmarks/gpu_prepare.sh here, --install there)")
        return _finish(result, args.out, started, 2)
    try:
        preload()
    except Exception as err:  # noqa: BLE001 - a package too old or without its own dependencies: say which
        result["environment"]["error"] = f"importing the trainers failed: {type(err).__name__}: {err}"
        return _finish(result, args.out, started, 2)
    from benchmarks.gpu_parts import DRY, REAL, Sizes

    sizes = Sizes(**(DRY if args.dry_run else REAL), diffusers_example=args.diffusers_example)
    unknown = [name for name in args.only if name not in {p.name for p in parts(sizes)} | {SHARDED_GROUP}]
    if args.list or unknown:
        if unknown:
            print(f"--only: no part {', '.join(unknown)}; the parts:", file=sys.stderr)
        for p in parts(sizes):
            print(f"{p.name:20s} {p.budget_s:4.0f} s  {p.what}")
        return 2 if unknown else 0
    work = Path(tempfile.mkdtemp(prefix="atelier-gpu-check-", dir=args.work))
    try:
        sizes = replace(sizes, work=work)
        env = run_part(Part("environment", "CUDA, card, disk, bf16 rate", 120, environment), 120, sizes, {})
        result["environment"].update({k: v for k, v in env.items() if k not in ("name", "what", "budget_s")})
        print(f"environment: {json.dumps(env, default=str)}", flush=True)
        if env["status"] != "ok":
            return _finish(result, args.out, started, 2)
        sizes = replace(sizes, peak_flops=env["peak_bf16_tflops"] * 1e12)

        def done(part: dict) -> None:  # saved after every part: a call cut short still brings back the parts done
            print(json.dumps(part, default=str), flush=True)
            result["parts"].append(part)
            result["total_s"] = round(time.monotonic() - started, 1)
            save(result, args.out)

        chosen = [p for p in parts(sizes) if not args.only or p.name in args.only
                  or (SHARDED_GROUP in args.only and p.name.startswith(SHARDED))]
        run_parts(chosen, sizes, args.total_s or (math.inf if args.dry_run else TOTAL_S),
                  budget_s=DRY_BUDGET_S if args.dry_run else None, on_result=done)
        failed = [p["name"] for p in result["parts"] if p["status"] not in ("ok", "skipped")]
        return _finish(result, args.out, started, 1 if failed else 0)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _finish(result: dict, out: Path | None, started: float, code: int) -> int:
    result["total_s"] = round(time.monotonic() - started, 1)
    if out is not None:
        save(result, out)
    print(markdown(result) if result["parts"] else result["environment"].get("error", result["environment"]))
    return code


if __name__ == "__main__":
    sys.exit(main())
