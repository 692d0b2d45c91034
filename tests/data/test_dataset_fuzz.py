"""Broken datasets from fixed seeds: every broken file is named in the report, no good image is lost, nothing
raises. Each dataset mixes good images with files broken one way each (the kinds below), in kohya folders."""
from __future__ import annotations

import io
import os
import random
import re
from pathlib import Path

import pytest
from PIL import Image

from trainers.core.options import config_from_dict
from trainers.preflight.report import preflight

DATASETS = 60


def _png(size: tuple[int, int] = (64, 64), color: tuple[int, int, int] = (200, 40, 40)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def _break(kind: str, folder: Path, name: str, rng: random.Random) -> tuple[str, bool]:
    """Write one broken entry; (the name the report must give, whether its image is lost)."""
    image = folder / f"{name}.png"
    if kind == "truncated":
        image.write_bytes(_png()[: rng.randint(20, 60)])
    elif kind == "empty":
        image.write_bytes(b"")
    elif kind == "not_an_image":
        image.write_bytes(b"%PDF-1.4 definitely not a png" * rng.randint(1, 5))
    elif kind == "dangling_link":
        os.symlink(folder / "nowhere.png", image)
    elif kind == "self_link":
        os.symlink(image, image)
    elif kind == "latin1_caption":
        image.write_bytes(_png())
        (folder / f"{name}.txt").write_bytes(f"caf\xe9 {name}".encode("latin-1"))
        return f"{name}.txt", False  # read as Windows-1252, kept
    elif kind == "caption_is_a_folder":
        image.write_bytes(_png())
        (folder / f"{name}.txt").mkdir()
        return "", False  # not a caption file: the image trains with the folder's tokens
    elif kind == "tiny_image":
        image.write_bytes(_png((1, 1)))
        return "", False  # a 1x1 image is still an image: upscaled into its bucket
    return image.name, True


KINDS = ("truncated", "empty", "not_an_image", "dangling_link", "self_link", "latin1_caption", "caption_is_a_folder",
         "tiny_image")


@pytest.mark.parametrize("seed", range(DATASETS))
def test_broken_files_are_named_and_cost_only_themselves(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    root = tmp_path / "data"
    expected_images, named = 0, []
    for f in range(rng.randint(1, 3)):
        folder = root / f"{rng.randint(1, 5)}_concept {f}"
        folder.mkdir(parents=True)
        good = rng.randint(1, 4)
        for i in range(good):
            (folder / f"good{i}.png").write_bytes(_png(color=(rng.randint(0, 255), 90, 90)))
            (folder / f"good{i}.txt").write_text(f"good {i}", encoding="utf-8")
        expected_images += good
        for b in range(rng.randint(0, 3)):
            must_name, lost = _break(rng.choice(KINDS), folder, f"bad{b}", rng)
            expected_images += not lost
            if must_name:
                named.append(must_name)
    cfg = config_from_dict("lora", {"train_data_dir": str(root), "resolution": "64",
                                    "pretrained_model_name_or_path": "org/model", "output_dir": str(tmp_path / "o"),
                                    "max_train_steps": 10})
    report = preflight(cfg)  # never raises
    text = report.text()
    assert "Traceback" not in text
    assert report.ok, text
    for name in named:
        assert name in text, f"{name} is not named in the report:\n{text}"
    kept = sum(int(n) for n in re.findall(r"\): (\d+) image\(s\), \d+ caption", text))
    assert kept == expected_images, text  # every image that can train, trains
