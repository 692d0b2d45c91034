"""The demo a newcomer runs first: its samples must show that training did something."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

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
def test_the_demo_lora_teaches_the_demo_model_a_cross_that_its_samples_show(built_demo: Path,
                                                                            tmp_path: Path) -> None:
    crosses = sorted((built_demo / "data").glob("*/*.png"))
    assert crosses and min(cross_score(p) for p in crosses) > 0.8, "the score recognises the dataset's crosses"

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "trainers", "lora", "--config", "presets/demo.toml", "--run-dir",
                           str(run), "--set", f"output_dir={str(tmp_path / 'out')!r}"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    samples = sorted((run / "samples").glob("*.png"))
    before = [cross_score(s) for s in samples if "_000000_" in s.name]
    after = [cross_score(s) for s in samples[-2:]]
    assert len(before) == 2 and "_000000_" not in samples[-1].name, [s.name for s in samples]
    assert sum(before) / 2 < 0.4, f"the demo model draws its own shapes before training: {before}"
    assert min(after) > 0.7, f"after the demo run both samples are crosses: {after}"
