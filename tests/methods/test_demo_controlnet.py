"""The demo covers the ControlNet tab: an edge map beside each demo image (demo/controls) and a preset that trains a
ControlNet on them; a demo built before they shipped gets them without its model being touched."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from trainers.core.options import load_config
from trainers.demo import BUILT_MARK, CONTROLS, MODEL, RECIPE, build_demo_dataset, demo_is_built, ensure_demo
from trainers.preflight.validate import validate

from helpers import events, run_trainer

REPO = Path(__file__).resolve().parents[2]
PRESET = REPO / "presets" / "demo_controlnet.toml"


def _outline_of(image: Path, control: Path) -> None:
    """`control` is a black and white image of `image`'s size whose white pixels lie where the shape meets the
    background, and only there."""
    grey = np.asarray(Image.open(image).convert("L"), dtype=np.int16)
    edges = np.asarray(Image.open(control).convert("L"))
    assert edges.shape == grey.shape and set(np.unique(edges)) == {0, 255}
    padded = np.pad(grey, 1, mode="edge")
    change = np.zeros(grey.shape, dtype=bool)  # a neighbour differs clearly
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            change |= np.abs(padded[1 + dy:1 + dy + grey.shape[0], 1 + dx:1 + dx + grey.shape[1]] - grey) > 40
    white = edges == 255
    assert white[change].mean() > 0.4 and not white[~change].any()


def test_the_demo_ships_an_edge_map_of_each_image_and_a_controlnet_preset_that_validates(
        built_demo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    images = sorted((built_demo / "data").glob("*/*.png"))
    assert images
    for image in images:
        _outline_of(image, built_demo / CONTROLS / image.parent.name / image.name)

    monkeypatch.chdir(REPO)  # the preset's paths are the repo's, as the demo preset's
    cfg = load_config("controlnet", PRESET)
    assert cfg.conditioning_data_dir == "demo/controls" and cfg.pretrained_model_name_or_path == "demo/tiny-sd1"
    assert validate(cfg) == []
    assert all(" --cn demo/controls/" in line for line in cfg.sample_prompt_lines)


def test_a_demo_built_before_the_control_images_gets_them_and_keeps_its_model(tmp_path: Path) -> None:
    model = tmp_path / MODEL
    model.mkdir()
    (model / BUILT_MARK).write_text(json.dumps({"recipe": RECIPE, "weights": "shipped"}), encoding="utf-8")
    (model / "weights").write_bytes(b"the demo model, as shipped")
    build_demo_dataset(tmp_path / "data")
    assert not demo_is_built(tmp_path)

    said = list(ensure_demo(tmp_path))
    assert said == [f"control images: {tmp_path / CONTROLS}"]  # no model built, no dataset rewritten
    assert (model / "weights").read_bytes() == b"the demo model, as shipped" and demo_is_built(tmp_path)
    for image in sorted((tmp_path / "data").glob("*/*.png")):
        _outline_of(image, tmp_path / CONTROLS / image.parent.name / image.name)
    assert list(ensure_demo(tmp_path)) == []


@pytest.mark.slow
def test_the_demo_controlnet_preset_trains(built_demo: Path, tmp_path: Path) -> None:
    from diffusers import ControlNetModel

    out, run_dir = tmp_path / "out", tmp_path / "run"
    result = run_trainer(["--config", str(PRESET), "--set", "max_train_steps=2", "--unset", "max_train_epochs",
                          "--unset", "sample_every_n_epochs", "--set", f"output_dir={json.dumps(str(out))}"],
                         run_dir, method="controlnet")
    assert result.returncode == 0, result.stderr[-3000:]
    assert events(run_dir)[-1]["type"] == "done"
    assert len(list((run_dir / "samples").glob("*.png"))) == 2  # made from two of the demo's outlines
    ControlNetModel.from_pretrained(str(out / "demo_controlnet"))
