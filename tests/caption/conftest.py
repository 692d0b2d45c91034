"""Tiny captioners and a small image folder for the caption and mask tests (built offline, once a session)."""
from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from trainers.caption.tiny import build_tiny_tagger

COLOURS = {"red": (255, 0, 0), "blue": (0, 0, 255), "green": (0, 255, 0), "dark": (60, 60, 60)}


@pytest.fixture(scope="session")
def tiny_tagger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_tagger(tmp_path_factory.mktemp("tagger"))


def image_folder(root: Path, count: int = 4, broken: bool = False) -> Path:
    """A kohya-style folder `<root>/10_sks` of small coloured images (and an unreadable .png with `broken`)."""
    folder = root / "10_sks"
    folder.mkdir(parents=True)
    names = list(COLOURS) * (count // len(COLOURS) + 1)
    for i, name in enumerate(names[:count]):
        Image.new("RGB", (32 + 8 * i, 32 + 8 * i), COLOURS[name]).save(folder / f"{i:02d}_{name}.png")
    if broken:
        (folder / "99_broken.png").write_bytes(b"this is not an image")
    return root


@pytest.fixture
def images(tmp_path: Path) -> Path:
    return image_folder(tmp_path / "data")
