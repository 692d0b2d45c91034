"""sd-scripts' fine-tuning metadata (in_json, a subset's metadata_file): one JSON of every image's caption and tags."""
from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from trainers.core.options import config_from_dict
from trainers.data.catalog import build_catalog


def _images(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        Image.new("RGB", (64, 64), (200, 30, 30)).save(folder / name)
    return folder


def _captions(catalog) -> dict[str, str]:
    return {image.path.name: image.caption for image in catalog.images}


def test_in_json_keys_are_stems_or_paths_and_captions_take_the_tags(tmp_path: Path) -> None:
    images = _images(tmp_path / "imgs", "a.png", "b.jpg", "c.webp")
    meta = tmp_path / "meta_cap.json"
    meta.write_text(json.dumps({
        "a": {"caption": "a red square", "tags": "red, square"},  # the stem, as merge_captions_to_metadata writes
        "b.jpg": {"tags": "only tags"},
        str(images / "c.webp"): {"caption": "absolute"},
        "gone": {"caption": "no such image"}}), encoding="utf-8")
    cfg = config_from_dict("finetune", {"in_json": str(meta), "train_data_dir": str(images), "dataset_repeats": 3,
                                        "resolution": "64"})
    warnings: list[str] = []
    catalog = build_catalog(cfg.values, warnings)
    assert _captions(catalog) == {"a.png": "a red square,red, square", "b.jpg": "only tags", "c.webp": "absolute"}
    assert len(catalog.samples) == 9  # 3 images x dataset_repeats
    assert any("1 of 4 image(s) not found" in w and "gone" in w for w in warnings), warnings


def test_a_dataset_config_subset_may_hold_a_metadata_file_jsonl_too(tmp_path: Path) -> None:
    images = _images(tmp_path / "imgs", "x.png", "y.png")
    (tmp_path / "meta.jsonl").write_text("\n".join(json.dumps(r) for r in (
        {"image_path": "x.png", "caption": "ex"}, {"image_path": "y.png", "caption": "why", "tags": "t"})),
        encoding="utf-8")
    (tmp_path / "data.toml").write_text(
        '[[datasets]]\nresolution = 64\n[[datasets.subsets]]\nmetadata_file = "meta.jsonl"\nimage_dir = "imgs"\n'
        'num_repeats = 2\n', encoding="utf-8")
    cfg = config_from_dict("lora", {"dataset_config": str(tmp_path / "data.toml"), "caption_separator": ";"})
    catalog = build_catalog(cfg.values, [])
    assert _captions(catalog) == {"x.png": "ex", "y.png": "why;t"} and len(catalog.samples) == 4
    assert images.is_dir()
