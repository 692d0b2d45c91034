"""Tiny captioners and a small image folder for the caption and mask tests (built offline, once a session)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from trainers.caption.tiny import build_tiny_tagger

REPO = Path(__file__).resolve().parents[2]

COLOURS = {"red": (255, 0, 0), "blue": (0, 0, 255), "green": (0, 255, 0), "dark": (60, 60, 60)}


@pytest.fixture(scope="session")
def tiny_tagger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_tagger(tmp_path_factory.mktemp("tagger"))


def image_folder(root: Path, count: int = 4, broken: bool = False, side: int | None = None) -> Path:
    """A kohya-style folder `<root>/10_sks` of small square coloured images, of `side` pixels or of sizes from 32 px
    up (and an unreadable .png with `broken`)."""
    folder = root / "10_sks"
    folder.mkdir(parents=True)
    names = list(COLOURS) * (count // len(COLOURS) + 1)
    for i, name in enumerate(names[:count]):
        Image.new("RGB", (side or 32 + 8 * i,) * 2, COLOURS[name]).save(folder / f"{i:02d}_{name}.png")
    if broken:
        (folder / "99_broken.png").write_bytes(b"this is not an image")
    return root


@pytest.fixture
def images(tmp_path: Path) -> Path:
    return image_folder(tmp_path / "data")


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every tiny captioner and masker, built once (a few seconds)."""
    from trainers.caption.tiny import BUILDERS

    root = tmp_path_factory.mktemp("tiny_models")
    return {name: build(root / name) for name, build in BUILDERS.items()}


def run_job(verb: str, run_dir: Path, *args: str, **kw: object) -> subprocess.CompletedProcess:
    """`python -m trainers <verb> --run-dir run_dir args...` as a process, offline."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "trainers", verb, "--run-dir", str(run_dir), "--device", "cpu",
                           *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, **kw)
