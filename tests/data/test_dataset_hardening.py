"""A broken file in a dataset costs that file, named, never its folder or the run."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainers.data.kohya_folders import DatasetLayoutError, scan_kohya_folders
from trainers.demo import build_dataset


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return build_dataset(tmp_path / "data")


def test_links_to_nowhere_and_to_themselves_are_named_and_skipped(dataset: Path) -> None:
    concept = dataset / "5_sks shape"
    os.symlink(concept / "loop", concept / "loop")
    os.symlink(concept / "gone.png", concept / "dangling.png")
    os.symlink(dataset / "a", dataset / "b")
    os.symlink(dataset / "b", dataset / "a")  # a loop of two at the top
    scan = scan_kohya_folders(dataset)
    assert scan.num_images == 8  # nothing of the folder is lost
    text = "\n".join(scan.warnings)
    assert '"5_sks shape/loop" cannot be followed' in text
    assert '"5_sks shape/dangling.png" is a link to' in text and "does not exist" in text
    assert '"data/a" cannot be followed' in text and '"data/b" cannot be followed' in text


def test_a_caption_that_is_not_utf8_is_read_as_windows_1252_and_named_unless_strict(dataset: Path) -> None:
    caption = dataset / "5_sks shape" / "000_red_circle.txt"
    caption.write_bytes("sks shape, caf\xe9 r\xf6d circle".encode("latin-1"))
    scan = scan_kohya_folders(dataset)
    item = next(i for s in scan.subsets for i in s.images if i.path.stem == "000_red_circle")
    assert item.caption == "sks shape, café röd circle"
    assert any(str(caption) in w and "not UTF-8" in w and "Windows-1252" in w for w in scan.warnings)
    with pytest.raises(DatasetLayoutError, match="not UTF-8.*strict_captions"):
        scan_kohya_folders(dataset, strict=True)


def test_a_huge_png_is_decoded_in_full_once_then_read_small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from PIL import Image

    from trainers.data import downscale
    from trainers.data.images import load_image

    monkeypatch.setenv("ATELIER_CACHE", str(tmp_path / "cache"))
    big = tmp_path / "big.png"
    Image.new("RGB", (1200, 800), (10, 200, 30)).save(big)
    first = load_image(big, min_side=100)
    assert first.size == (150, 100)  # shorter side at what the bucket needs, aspect kept
    copies = list(downscale.cache_dir().glob("*.png"))
    assert len(copies) == 1
    opened: list[str] = []
    real_open = Image.open
    monkeypatch.setattr(Image, "open", lambda p, *a, **k: opened.append(str(p)) or real_open(p, *a, **k))
    again = load_image(big, min_side=100)
    assert again.size == (150, 100) and str(copies[0]) in opened  # read from the copy
    assert load_image(big, min_side=400).size == (1200, 800)  # not 4x too big for this need: read as it is
    big.touch()  # an edited image gets a new copy
    Image.new("RGB", (1200, 800), (200, 0, 0)).save(big)
    assert load_image(big, min_side=100).getpixel((0, 0)) == (200, 0, 0)


def test_the_catalog_says_which_images_are_downscaled_once(tmp_path: Path) -> None:
    from PIL import Image

    from trainers.core.options import config_from_dict
    from trainers.data.catalog import build_catalog

    concept = tmp_path / "data" / "2_big"
    concept.mkdir(parents=True)
    Image.new("RGB", (2048, 2048)).save(concept / "huge.png")
    Image.new("RGB", (64, 64)).save(concept / "small.png")
    cfg = config_from_dict("lora", {"train_data_dir": str(tmp_path / "data"), "resolution": "64"})
    warnings: list[str] = []
    build_catalog(cfg.values, warnings)
    assert any("1 image(s) are over 4x" in w and "huge.png, 2048x2048" in w for w in warnings), warnings
