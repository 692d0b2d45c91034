"""`python -m trainers demo`: a tiny model and a captioned dataset, built offline.

The demo model knows grey circles, squares and triangles (demo_pretrain.py), so its samples are shapes rather
than noise; the demo dataset is a shape it has never seen (a cross), so the demo LoRA visibly teaches it something
new within the demo minute. Teaching it the shapes takes minutes on CPU (an hour on a busy one), so the weights
taught once ship with the repo (trainers/demo_weights/: fp16, with the recipe number and each file's sha256): a
build makes the tiny architecture and copies them in, in seconds. Without them, or when they are of an older recipe
or no longer fit the architecture, the model is taught here, and `--progress FILE` reports how far the build is in a
small JSON file (the page shows it while it already serves).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainers.core.processes import pid_alive
from trainers.demo_shapes import DARK_BG, LIGHT_BG, draw_shape, edge_map

COLORS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 80, 220), "yellow": (230, 210, 40)}
SHAPES = ("circle", "square")
MODEL = "tiny-sd1"
CONTROLS = "controls"  # beside data/: an edge map of each demo image, for the ControlNet tab (presets/demo_controlnet)
BUILT_MARK = "atelier_demo.json"  # written last: a model folder without it is an interrupted build
RECIPE = 1  # bump when the demo model's training changes, so older demo models are rebuilt (and re-ship the weights)
SHIPPED = Path(__file__).resolve().parent / "demo_weights"
MANIFEST = "manifest.json"
PROGRESS = ".build.json"  # in the demo folder while a build runs: its progress, read by the page
WEIGHT_FILES = {"unet": "unet/diffusion_pytorch_model.safetensors", "vae": "vae/diffusion_pytorch_model.safetensors",
                "text_encoder": "text_encoder/model.safetensors"}
SHIP_COMMAND = "python -m trainers demo --out /tmp/demo-taught --from-scratch --ship trainers/demo_weights"
DENOISER_STEP_COST = 2.5  # a denoiser step's time in autoencoder steps (measured on CPU), for the ETA


def build_dataset(root: Path, folder: str = "5_sks shape", size: int = 96) -> Path:
    """Eight captioned images of coloured shapes in kohya layout (`root/<repeats>_<tokens>/`); the tests' data."""
    subset = root / folder
    subset.mkdir(parents=True, exist_ok=True)
    for i, (color, shape) in enumerate((c, s) for c in COLORS for s in SHAPES):
        box = (size // 5, size // 5, size - size // 5, size - size // 5)
        img = draw_shape(shape, COLORS[color], LIGHT_BG if i % 2 else DARK_BG, (size, size + 16 * (i % 3)), box)
        img.save(subset / f"{i:03d}_{color}_{shape}.png")
        (subset / f"{i:03d}_{color}_{shape}.txt").write_text(f"sks shape, {color} {shape}", encoding="utf-8")
    return root


def build_demo_dataset(root: Path, folder: str = "25_sks shape", size: int = 64) -> Path:
    """Eight captioned light grey crosses on a dark background (a shape the demo model has not learned)."""
    subset = root / folder
    subset.mkdir(parents=True, exist_ok=True)
    for i in range(8):
        radius, shift, tone = 21 - i % 3, (i % 5) - 2, 180 + 10 * (i % 4)
        centre = size // 2 + shift
        img = draw_shape("cross", (tone,) * 3, DARK_BG, (size, size),
                         (centre - radius, centre - radius, centre + radius, centre + radius))
        img.save(subset / f"{i:03d}_cross.png")
        (subset / f"{i:03d}_cross.txt").write_text("sks shape, grey cross", encoding="utf-8")
    return root


def build_demo_controls(data: Path, controls: Path) -> Path:
    """The edge map of each demo image under its subfolder and file name in `controls`, as ControlNet training reads
    conditioning_data_dir."""
    from PIL import Image

    for image in sorted(Path(data).glob("*/*.png")):
        target = Path(controls) / image.parent.name / image.name
        target.parent.mkdir(parents=True, exist_ok=True)
        with Image.open(image) as shape:
            edge_map(shape).save(target)
    return Path(controls)


def model_is_built(out: Path) -> bool:
    """The demo model of the current recipe is under `out`."""
    try:
        mark = json.loads((Path(out) / MODEL / BUILT_MARK).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return mark.get("recipe") == RECIPE


def demo_is_built(out: Path) -> bool:
    """The demo model (of the current recipe), its dataset and its control images are under `out`."""
    return model_is_built(out) and (Path(out) / "data").is_dir() and (Path(out) / CONTROLS).is_dir()


def build_demo_data(out: Path, missing_only: bool = False) -> Iterator[str]:
    """Write the demo dataset and its control images under `out` (with `missing_only`, those not there yet: a demo
    built before the control images shipped gets them, its model and dataset untouched)."""
    from trainers.core.fsio import atomic_dir

    out = Path(out)
    if not (missing_only and (out / "data").is_dir()):
        shutil.rmtree(out / "data", ignore_errors=True)  # an older demo's dataset
        yield f"dataset: {build_demo_dataset(out / 'data')}"
    if not (missing_only and (out / CONTROLS).is_dir()):
        with atomic_dir(out / CONTROLS) as staging:
            build_demo_controls(out / "data", staging)
        yield f"control images: {out / CONTROLS}"


class BuildProgress:
    """How far a build is, in a small JSON file rewritten whole (atomically) at each report; no file: no reports."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.started = time.time()
        self.state: dict[str, Any] = {"state": "building", "pid": os.getpid(), "started": self.started,
                                      "updated": self.started, "stage": "starting", "step": 0, "steps": 0,
                                      "eta_s": None}
        self._stage_from = self.started

    def stage(self, stage: str) -> None:
        self._write(stage=stage, step=0, steps=0, eta_s=None)

    def step(self, stage: str, step: int, steps: int, plan: dict[str, int]) -> None:
        """A pretraining step; `plan`: every stage's steps in order. The ETA comes from the current stage's pace."""
        now = time.time()
        if stage != self.state["stage"]:
            self._stage_from = self.state["updated"]  # when the stage before it ended
        cost = {name: 1.0 if name == "autoencoder" else DENOISER_STEP_COST for name in plan}
        later = list(plan)[list(plan).index(stage) + 1:]
        left = (steps - step) * cost[stage] + sum(plan[name] * cost[name] for name in later)
        pace = (now - self._stage_from) / (step * cost[stage])  # seconds an autoencoder step takes now
        self._write(stage=stage, step=step, steps=steps, eta_s=pace * left)

    def failed(self, message: str) -> None:
        self._write(state="failed", message=message, eta_s=None)

    def _write(self, **values: Any) -> None:
        self.state.update(values, updated=time.time())
        if self.path is not None:
            from trainers.core.fsio import atomic_path

            with atomic_path(self.path, durable=False) as tmp:
                tmp.write_text(json.dumps(self.state), encoding="utf-8")

    def remove(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def build_demo(out: Path, sdxl: bool = False, pretrain: bool = True, shipped: Path | None = SHIPPED,
               progress: BuildProgress | None = None) -> Iterator[str]:
    """Build the demo model (taught shapes unless `pretrain` is off: from the `shipped` weights when they fit, else
    here) and dataset under `out`, saying what it does.

    The model is built in a temporary folder and moved into place when complete, so an interrupted
    build is started again rather than used.
    """
    from trainers.models.sd.tiny import build_tiny_sd1
    from trainers.models.sdxl.tiny import build_tiny_sdxl
    from trainers.models.tiny import tiny_vae
    from trainers.train.quiet import quiet_libraries

    quiet_libraries()  # no loading and saving bars between the lines that say what is happening
    progress = progress or BuildProgress(None)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_builds(out)
    building = out / f".{MODEL}.building-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    progress.stage("building the tiny model")
    build_tiny_sd1(building, vae=tiny_vae(levels=3))  # 16x16 latents at 64 px: a quarter of the work a step
    weights = "random"
    if pretrain:
        why_not = install_shipped(building, shipped) if shipped is not None else "--from-scratch"
        if not why_not:
            weights = "shipped"
            yield f"model weights: the shipped pretrained ones ({shipped})"
        else:
            weights = "taught here"
            yield f"teaching the demo model grey shapes (a few minutes on CPU; the shipped weights: {why_not})"
            yield from _teach(building, progress)
    (building / BUILT_MARK).write_text(json.dumps({"recipe": RECIPE if pretrain else None, "weights": weights}),
                                       encoding="utf-8")
    shutil.rmtree(out / MODEL, ignore_errors=True)
    building.rename(out / MODEL)
    yield f"model: {out / MODEL}"
    if sdxl:
        yield f"model: {build_tiny_sdxl(out / 'tiny-sdxl')}"
    progress.stage("writing the dataset")
    yield from build_demo_data(out)


def _teach(folder: Path, progress: BuildProgress) -> Iterator[str]:
    from trainers.demo_pretrain import UNET_STEPS, VAE_STEPS, pretrain_demo_model

    plan = {"autoencoder": VAE_STEPS, "denoiser": UNET_STEPS}
    for p in pretrain_demo_model(folder):
        progress.step(p.stage, p.step, p.steps, plan)
        if p.step % 100 == 0 or p.step == p.steps:
            eta = progress.state["eta_s"]
            yield f"  {p.stage} {p.step}/{p.steps} ({time.time() - progress.started:.0f} s; about {eta:.0f} s left)"


def _remove_abandoned_builds(out: Path) -> None:
    """Temporary folders of builds whose process is gone (killed with the GUI that started them)."""
    for folder in out.glob(f".{MODEL}.building-*"):
        pid = folder.name.rpartition("-")[2]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def ensure_demo(out: Path, progress: BuildProgress | None = None) -> Iterator[str]:
    """Build the demo under `out` unless it is already there (what the tests' `built_demo` runs); a demo model of this
    recipe is kept, and only the data it lacks is written."""
    if model_is_built(out):
        yield from build_demo_data(out, missing_only=True)
    else:
        yield from build_demo(out, progress=progress)


# ---- the shipped weights ---------------------------------------------------------------------------------------

def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def install_shipped(folder: Path, shipped: Path) -> str:
    """Put the shipped weights into the tiny model just built in `folder`, as fp32; "" when done, else why not.

    Nothing is written unless every file is of this recipe, has its recorded sha256 and fits the architecture.
    """
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    try:
        manifest = json.loads((shipped / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return f"cannot read {shipped / MANIFEST}: {err}"
    if manifest.get("recipe") != RECIPE:
        return f"they are of recipe {manifest.get('recipe')}, this demo is recipe {RECIPE}"
    weights = {}
    for component, name in WEIGHT_FILES.items():
        file = shipped / f"{component}.safetensors"
        if not file.is_file() or _sha256(file) != manifest.get("sha256", {}).get(component):
            return f"{file} is missing or not the file its sha256 in {MANIFEST} names (a Git LFS pointer?)"
        tensors, built = load_file(file), load_file(folder / name)
        if {k: v.shape for k, v in tensors.items()} != {k: v.shape for k, v in built.items()}:
            return f"the shipped {component} does not fit the tiny model's architecture (did it change?)"
        weights[component] = {k: v.astype(built[k].dtype) for k, v in tensors.items()}
    for component, name in WEIGHT_FILES.items():
        with safe_open(folder / name, "np") as fh:
            metadata = fh.metadata()
        save_file(weights[component], folder / name, metadata=metadata)
    vae_config = folder / "vae" / "config.json"
    config = json.loads(vae_config.read_text(encoding="utf-8"))
    vae_config.write_text(json.dumps({**config, "scaling_factor": manifest["vae_scaling_factor"]}, indent=2),
                          encoding="utf-8")
    return ""


def ship_weights(model: Path, dest: Path) -> Path:
    """Write a built demo model's weights to `dest` as the repo ships them: fp16 files and their manifest."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    dest.mkdir(parents=True, exist_ok=True)
    digests = {}
    for component, name in WEIGHT_FILES.items():
        tensors = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in load_file(model / name).items()}
        save_file(tensors, dest / f"{component}.safetensors")
        digests[component] = _sha256(dest / f"{component}.safetensors")
    scaling = json.loads((model / "vae" / "config.json").read_text(encoding="utf-8"))["scaling_factor"]
    manifest = {"recipe": RECIPE, "vae_scaling_factor": scaling, "sha256": digests, "made_by": SHIP_COMMAND}
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return dest


# ---- the command -----------------------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sdxl", action="store_true", help="also build a tiny SDXL model")
    parser.add_argument("--random-weights", action="store_true",
                        help="skip teaching the model shapes: random weights, built in seconds")
    parser.add_argument("--from-scratch", action="store_true",
                        help="teach the model shapes here (a few minutes on CPU) instead of using the shipped weights")
    parser.add_argument("--ship", type=Path, metavar="DIR",
                        help="then write the model's weights to DIR as the repo ships them (trainers/demo_weights)")
    parser.add_argument("--if-missing", action="store_true", help="build only when no demo of this recipe is there")
    parser.add_argument("--progress", type=Path, metavar="FILE", help="report the build's progress in FILE (JSON)")
    parser.add_argument("--stop-with-parent", action="store_true", help="exit when the process that started it ends")


def main(args: argparse.Namespace) -> int:
    if args.ship and args.random_weights:
        raise SystemExit("error: --ship writes the weights of a taught model; leave out --random-weights")
    if args.stop_with_parent:
        _exit_with_parent()
    if args.if_missing and demo_is_built(args.out):
        print(f"demo: {args.out} is built")
        return 0
    progress = BuildProgress(args.progress)
    try:
        if args.if_missing and not args.sdxl and model_is_built(args.out):
            lines = build_demo_data(args.out, missing_only=True)
        else:
            lines = build_demo(args.out, sdxl=args.sdxl, pretrain=not args.random_weights,
                               shipped=None if args.from_scratch else SHIPPED, progress=progress)
        for line in lines:
            print(line, flush=True)
        if args.ship:
            print(f"shipped weights: {ship_weights(Path(args.out) / MODEL, args.ship)}")
    except Exception as err:
        progress.failed(f"{type(err).__name__}: {err}")
        raise
    progress.remove()
    return 0


def _exit_with_parent() -> None:
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        print("demo: the process that started this build ended; stopping", file=sys.stderr, flush=True)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
