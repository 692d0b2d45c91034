"""`python -m trainers demo`: a tiny model and a captioned dataset, built offline in seconds."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from PIL import Image, ImageDraw

COLORS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 80, 220), "yellow": (230, 210, 40)}
SHAPES = ("circle", "square")


def build_dataset(root: Path, folder: str = "5_sks shape", size: int = 96) -> Path:
    """Eight captioned images of coloured shapes in kohya layout (`root/<repeats>_<tokens>/`)."""
    subset = root / folder
    subset.mkdir(parents=True, exist_ok=True)
    for i, (color, shape) in enumerate((c, s) for c in COLORS for s in SHAPES):
        img = Image.new("RGB", (size, size + 16 * (i % 3)), (245, 245, 235) if i % 2 else (30, 30, 40))
        draw = ImageDraw.Draw(img)
        box = (size // 5, size // 5, size - size // 5, size - size // 5)
        (draw.ellipse if shape == "circle" else draw.rectangle)(box, fill=COLORS[color])
        img.save(subset / f"{i:03d}_{color}_{shape}.png")
        (subset / f"{i:03d}_{color}_{shape}.txt").write_text(f"sks shape, {color} {shape}", encoding="utf-8")
    return root


def build_demo(out: Path, sdxl: bool = False) -> Iterator[str]:
    from trainers.models.sd.tiny import build_tiny_sd1
    from trainers.models.sdxl.tiny import build_tiny_sdxl

    out = Path(out)
    yield f"model: {build_tiny_sd1(out / 'tiny-sd1')}"
    if sdxl:
        yield f"model: {build_tiny_sdxl(out / 'tiny-sdxl')}"
    yield f"dataset: {build_dataset(out / 'data')}"
