"""A mask job over a dataset .toml writes each subset's masks into its own conditioning_data_dir (where masked_loss
reads them; a mask already there, of any image extension, is found), a subset without one into `<folder>_masks`
with a warning naming the line to add; the Dataset tab then shows every mask over its image."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

import gui.thumbnails as thumbnails
from gui.dataset_tab import gallery_items
from trainers.caption.cli import _run
from trainers.caption.options import check_config, config_from_values
from trainers.caption.tiny import build_tiny_clipseg

pytestmark = pytest.mark.slow  # a tiny CLIPSeg runs


@pytest.fixture()
def toml(tmp_path: Path) -> Path:
    for folder, names in (("own", ("a", "b")), ("plain", ("c",))):
        (tmp_path / folder).mkdir()
        for name in names:
            Image.new("RGB", (40, 40), (200, 40, 40)).save(tmp_path / folder / f"{name}.png")
    (tmp_path / "own masks").mkdir()
    Image.new("L", (40, 40), 255).save(tmp_path / "own masks" / "a.jpg")  # made earlier, by hand
    path = tmp_path / "dataset.toml"
    path.write_text('[[datasets]]\n[[datasets.subsets]]\nimage_dir = "own"\nconditioning_data_dir = "own masks"\n'
                    '[[datasets.subsets]]\nimage_dir = "plain"\n', encoding="utf-8")
    return path


def test_a_mask_job_over_a_dataset_toml_writes_each_subsets_masks_where_training_reads_them(
        toml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(thumbnails, "THUMBS", tmp_path / "thumbs")
    values = {"images": str(toml), "model": str(build_tiny_clipseg(tmp_path / "clipseg")), "prompt": "a thing",
              "device": "cpu", "threshold": 0.5}
    assert [i.field for i in check_config(config_from_values("masks", {**values, "masks_dir": str(tmp_path / "x")}))
            ] == ["masks_dir"]  # a .toml says where masks go
    cfg = config_from_values("masks", values)
    assert check_config(cfg) == []
    _run(cfg, tmp_path / "job", None)

    assert sorted(p.name for p in (tmp_path / "own masks").iterdir()) == ["a.jpg", "b.png"]  # a.jpg kept (skip)
    with Image.open(tmp_path / "own masks" / "a.jpg") as kept:
        assert kept.getextrema() == (255, 255)
    assert (tmp_path / "plain_masks" / "c.png").is_file()
    events = [json.loads(line) for line in (tmp_path / "job" / "events.jsonl").read_text().splitlines()]
    warned = " ".join(e["message"] for e in events if e["type"] == "warning")
    assert "plain" in warned and f'conditioning_data_dir = "{tmp_path / "plain_masks"}"' in warned
    report = json.loads((tmp_path / "job" / "report.json").read_text())
    assert report["written"] == 2 and report["skipped_existing"] == 1

    shown = gallery_items(toml)
    assert [caption.endswith("· masked") for _, caption in shown] == [True, True, True]
