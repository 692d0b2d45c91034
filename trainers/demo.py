"""`python -m trainers demo`: a tiny model and a captioned dataset, built offline.

The demo model first learns grey circles, squares and triangles (a few minutes on CPU, once: see
demo_pretrain.py), so its samples are shapes rather than noise; the demo dataset is a shape it has never
seen (a cross), so the demo LoRA visibly teaches it something new within the demo minute.
"""
from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from trainers.demo_shapes import DARK_BG, LIGHT_BG, draw_shape

COLORS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 80, 220), "yellow": (230, 210, 40)}
SHAPES = ("circle", "square")
MODEL = "tiny-sd1"
BUILT_MARK = "atelier_demo.json"  # written last: a model folder without it is an interrupted build
RECIPE = 1  # bump when the demo model's training changes, so older demo models are rebuilt


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


def demo_is_built(out: Path) -> bool:
    """The demo model (of the current recipe) and its dataset are under `out`."""
    try:
        mark = json.loads((Path(out) / MODEL / BUILT_MARK).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return mark.get("recipe") == RECIPE and (Path(out) / "data").is_dir()


def build_demo(out: Path, sdxl: bool = False, pretrain: bool = True) -> Iterator[str]:
    """Build the demo model (taught shapes unless `pretrain` is off) and dataset under `out`, saying what it does.

    The model is built in a temporary folder and moved into place when complete, so an interrupted
    build is started again rather than used.
    """
    from trainers.models.sd.tiny import build_tiny_sd1
    from trainers.models.sdxl.tiny import build_tiny_sdxl
    from trainers.models.tiny import tiny_vae
    from trainers.train.quiet import quiet_libraries

    quiet_libraries()  # no loading and saving bars between the lines that say what is happening
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    building = out / f".{MODEL}.building-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    build_tiny_sd1(building, vae=tiny_vae(levels=3))  # 16x16 latents at 64 px: a quarter of the work a step
    if pretrain:
        from trainers.demo_pretrain import pretrain_demo_model

        yield from pretrain_demo_model(building)
    (building / BUILT_MARK).write_text(json.dumps({"recipe": RECIPE if pretrain else None}), encoding="utf-8")
    shutil.rmtree(out / MODEL, ignore_errors=True)
    building.rename(out / MODEL)
    yield f"model: {out / MODEL}"
    if sdxl:
        yield f"model: {build_tiny_sdxl(out / 'tiny-sdxl')}"
    shutil.rmtree(out / "data", ignore_errors=True)  # an older demo's dataset
    yield f"dataset: {build_demo_dataset(out / 'data')}"


def ensure_demo(out: Path) -> Iterator[str]:
    """Build the demo under `out` unless it is already there (what `app.py --demo` runs)."""
    if not demo_is_built(out):
        yield from build_demo(out)
