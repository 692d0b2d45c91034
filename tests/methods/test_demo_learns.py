"""The demo a newcomer runs first: its model draws shapes from the weights the repo ships, and its samples must show
that training did something."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from trainers.demo import BUILT_MARK, MANIFEST, MODEL, RECIPE, SHIP_COMMAND, SHIPPED, WEIGHT_FILES, build_demo

REPO = Path(__file__).resolve().parents[2]


def cross_score(image: Path) -> float:
    """1 for a centred cross, about 0 for a square or circle: the share of the cross's arms the shape covers,
    less the share of the corners between the arms it covers (a cross leaves them empty)."""
    grey = np.asarray(Image.open(image).convert("L"), dtype=np.float32)
    edge = np.concatenate([grey[:4].ravel(), grey[-4:].ravel(), grey[:, :4].ravel(), grey[:, -4:].ravel()])
    shape = np.abs(grey - np.median(edge)) > 40  # differs from the background
    y, x = np.abs(np.mgrid[:grey.shape[0], :grey.shape[1]] - grey.shape[0] // 2)
    arms = ((x <= 4) & (y <= 18)) | ((y <= 4) & (x <= 18))
    corners = (x >= 9) & (y >= 9) & (x <= 18) & (y <= 18)
    return float(shape[arms].mean() - shape[corners].mean())


@pytest.mark.slow
@pytest.mark.long
def test_the_demo_lora_teaches_the_demo_model_a_cross_that_its_samples_show(tmp_path: Path) -> None:
    """The demo as a newcomer runs it from a fresh folder (`trainers demo`, then the preset's relative paths)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    built = subprocess.run([sys.executable, "-m", "trainers", "demo", "--out", "demo"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    crosses = sorted((tmp_path / "demo" / "data").glob("*/*.png"))
    assert crosses and min(cross_score(p) for p in crosses) > 0.8, "the score recognises the dataset's crosses"

    run = tmp_path / "runs" / "demo"
    done = subprocess.run([sys.executable, "-m", "trainers", "lora", "--config", str(REPO / "presets" / "demo.toml"),
                           "--run-dir", "runs/demo"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "done:" in done.stdout and (tmp_path / "demo" / "output" / "demo_lora.safetensors").exists()
    samples = sorted((run / "samples").glob("*.png"))
    before = [cross_score(s) for s in samples if "_000000_" in s.name]
    after = [cross_score(s) for s in samples[-2:]]
    assert len(before) == 2 and "_000000_" not in samples[-1].name, [s.name for s in samples]
    assert sum(before) / 2 < 0.4, f"the demo model draws its own shapes before training: {before}"
    assert min(after) > 0.7, f"after the demo run both samples are crosses: {after}"


def shape_score(image) -> float:
    """About 1 for one flat shape in the middle of a plain background, about 0 for noise or an empty image: the share
    of the centre that differs from the background, less the share of the border that does."""
    grey = np.asarray(image.convert("L"), dtype=np.float32)
    edge = np.concatenate([grey[:4].ravel(), grey[-4:].ravel(), grey[:, :4].ravel(), grey[:, -4:].ravel()])
    shape = np.abs(grey - np.median(edge)) > 40
    centre, size = grey.shape[0] // 2, 10
    border = np.ones_like(shape)
    border[6:-6, 6:-6] = False
    return float(shape[centre - size:centre + size, centre - size:centre + size].mean() - shape[border].mean())


def test_the_shipped_demo_weights_are_of_this_recipe_and_whole() -> None:
    manifest = json.loads((SHIPPED / MANIFEST).read_text(encoding="utf-8"))
    assert manifest["recipe"] == RECIPE, f"the demo recipe changed: teach and ship its weights again: {SHIP_COMMAND}"
    for component in WEIGHT_FILES:
        data = (SHIPPED / f"{component}.safetensors").read_bytes()
        assert hashlib.sha256(data).hexdigest() == manifest["sha256"][component], component
    assert sum(f.stat().st_size for f in SHIPPED.iterdir()) < 5_000_000  # fp16: a few MB in the repository


def _mean_shape_score(model: Path) -> float:
    """The shape score of 12 images of the model: grey squares, circles and triangles, 4 seeds each."""
    import torch
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline.from_pretrained(model, safety_checker=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    scores = [shape_score(pipe(f"grey {shape}", num_inference_steps=20, guidance_scale=7.5, height=64, width=64,
                               generator=torch.Generator().manual_seed(seed)).images[0])
              for shape in ("square", "circle", "triangle") for seed in range(4)]
    return sum(scores) / len(scores)


@pytest.mark.slow
def test_a_demo_build_takes_the_shipped_weights_and_its_model_draws_shapes(tmp_path: Path) -> None:
    said = list(build_demo(tmp_path / "demo"))
    assert any("shipped pretrained" in line for line in said), said
    model = tmp_path / "demo" / MODEL
    assert json.loads((model / BUILT_MARK).read_text())["weights"].startswith("shipped")
    list(build_demo(tmp_path / "random", pretrain=False))
    taught, untaught = _mean_shape_score(model), _mean_shape_score(tmp_path / "random" / MODEL)
    assert taught > 0.45 and untaught < 0.2, (taught, untaught)  # measured: 0.61 and 0.05
