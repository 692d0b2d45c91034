"""Real datasets hold broken and odd files: each is handled or skipped with its reason, and training goes on."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from trainers.core.options import TrainConfig
from trainers.data import kohya_folders
from trainers.data.catalog import build_catalog
from trainers.data.dataset import CaptionedImages, prepare_sample_image
from trainers.data.images import load_image_rgb
from trainers.preflight.report import preflight

from image_files import bad_and_odd_files, corrupt_middle_png, save_image

SKIP_REASONS = {
    "bad_truncated_jpeg": "truncated or corrupt",
    "bad_truncated_png": "truncated or corrupt",
    "bad_zero_bytes": "empty file (0 bytes)",
    "bad_not_an_image": "not an image",
}


@pytest.fixture
def messy(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    files = bad_and_odd_files(tmp_path / "data" / "3_sks thing")
    return tmp_path / "data", files


def test_each_bad_file_is_skipped_with_its_reason(messy: tuple[Path, dict[str, Path]]) -> None:
    data, files = messy
    catalog = build_catalog(TrainConfig("lora", {"train_data_dir": str(data), "resolution": "64"}).values)
    skipped = {s.path: s.reason for s in catalog.skipped}
    assert set(skipped) == {files[k] for k in SKIP_REASONS}
    for kind, reason in SKIP_REASONS.items():
        assert skipped[files[kind]].startswith(reason), (kind, skipped[files[kind]])
    kept = {image.path: image for image in catalog.images}
    assert set(kept) == {p for k, p in files.items() if not k.startswith("bad_")}
    assert kept[files["exif_rotated"]].size == (64, 128)  # bucketed as it is shown: upright
    assert len(catalog.samples) == 3 * len(kept)


def pixels_of(image) -> np.ndarray:
    prepared = prepare_sample_image(image, False, None, False)
    return ((prepared.pixels.permute(1, 2, 0).numpy() + 1) * 127.5).round()


def test_odd_formats_are_converted_correctly(messy: tuple[Path, dict[str, Path]]) -> None:
    data, files = messy
    catalog = build_catalog(TrainConfig("lora", {"train_data_dir": str(data), "resolution": "64"}).values)
    images = {image.path: image for image in catalog.images}
    rgba = pixels_of(images[files["rgba"]])
    assert (rgba[0, 0] == 255).all() and rgba[32, 32].tolist() == [200, 30, 30]  # composited on white
    palette = pixels_of(images[files["palette"]])
    assert (palette[0, 0] == 255).all() and palette[32, 32].tolist() == [40, 200, 40]
    grey = pixels_of(images[files["grey16"]])
    assert abs(grey[10, 10, 0] - 40000 / 65535 * 255) <= 1  # 16-bit scaled, not clipped to white
    assert pixels_of(images[files["png16"]]).std() > 20  # 48-bit RGB decoded, not flat
    cmyk = load_image_rgb(files["cmyk_jpeg"])
    assert cmyk.mode == "RGB" and cmyk.size == (80, 96)
    rotated = prepare_sample_image(images[files["exif_rotated"]], False, None, False)
    assert rotated.original_size == (128, 64)  # (h, w) upright, for SDXL's size conditioning


def test_very_large_images_are_decoded_small_or_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = save_image(tmp_path / "data" / "1_big" / "photo.jpg", (1600, 1200))
    catalog = build_catalog(TrainConfig("lora", {"train_data_dir": str(tmp_path / "data"), "resolution": "64"}).values)
    (image,) = catalog.images
    assert load_image_rgb(big, min_side=128).size[0] < 1600  # JPEG decoded at a reduced scale
    prepared = prepare_sample_image(image, False, None, False)
    assert prepared.original_size == (1200, 1600) and prepared.pixels.shape == (3, 64, 64)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 400_000)  # 1600 x 1200 is now a decompression bomb
    with pytest.raises(Exception, match="no usable images"):
        build_catalog(TrainConfig("lora", {"train_data_dir": str(tmp_path / "data"), "resolution": "64"}).values)
    save_image(tmp_path / "data" / "1_big" / "small.png", (64, 64))
    catalog = build_catalog(TrainConfig("lora", {"train_data_dir": str(tmp_path / "data"), "resolution": "64"}).values)
    assert catalog.skipped[0].path == big and catalog.skipped[0].reason.startswith("too large")


def test_an_unreadable_folder_is_skipped_and_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save_image(tmp_path / "data" / "2_good" / "a.png", (64, 64))
    save_image(tmp_path / "data" / "2_locked" / "b.png", (64, 64))
    real_scandir = os.scandir

    def scandir(path):  # as when the folder's permissions deny reading (tests run as root)
        if str(path).endswith("2_locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(kohya_folders.os, "scandir", scandir)
    warnings: list[str] = []
    catalog = build_catalog(TrainConfig("lora", {"train_data_dir": str(tmp_path / "data"), "resolution": "64"}).values,
                            warnings)
    assert [image.path.name for image in catalog.images] == ["a.png"]
    assert any("2_locked" in w and "could not be read (Permission denied)" in w for w in warnings)


def test_a_file_that_fails_mid_epoch_is_replaced_by_another_of_its_bucket(tmp_path: Path) -> None:
    folder = tmp_path / "data" / "1_sks thing"
    corrupt_middle_png(folder / "broken.png")
    (folder / "broken.txt").write_text("the broken one")
    save_image(folder / "fine.png", (64, 64))
    (folder / "fine.txt").write_text("the fine one")
    catalog = build_catalog(TrainConfig("lora", {"train_data_dir": str(tmp_path / "data"), "resolution": "64"}).values)
    assert len(catalog.images) == 2  # the cheap checks cannot see it
    dataset = CaptionedImages(catalog, lambda caps: [caps], seed=0)
    broken = next(i for i in range(2) if catalog.images[catalog.samples[i]].path.name == "broken.png")
    item = dataset[(0, broken, 0)]
    assert item["input_ids"] == ["the fine one"]  # the replacement brings its own caption
    assert len(item["problems"]) == 1 and "broken.png" in item["problems"][0]


def test_preflight_lists_skipped_files_and_duplicates(messy: tuple[Path, dict[str, Path]], tmp_path: Path) -> None:
    data, files = messy
    save_image(data / "3_sks thing" / "transparent.jpg", (64, 64))  # shares transparent.txt with the PNG
    (data / "1_other").mkdir()
    shutil.copy(files["palette"], data / "1_other" / "palette.png")  # the same picture in two folders
    save_image(data / "1_other" / "grey16.png", (64, 64))  # same name as in the other folder, another picture
    report = preflight(TrainConfig("lora", {"train_data_dir": str(data), "resolution": "64", "max_train_epochs": 1,
                                            "pretrained_model_name_or_path": "org/model",
                                            "output_dir": str(tmp_path / "out")}))
    assert report.ok, report.text()
    text = report.text()
    assert f"{files['bad_zero_bytes']}: empty file (0 bytes)" in text
    assert "4 file(s) skipped" in text
    names = {name for name, _ in report.duplicates}
    assert names == {"transparent.*", "palette.png"}


def run_mixed_folder_training(tiny_sd1_dir: Path, tmp_path: Path) -> tuple[Path, object]:
    from helpers import run_trainer, sets

    data = tmp_path / "data"
    bad_and_odd_files(data / "1_sks thing", {"bad_truncated_jpeg", "bad_zero_bytes", "bad_not_an_image", "rgba",
                                             "exif_rotated"})
    corrupt_middle_png(data / "1_sks thing" / "fails late.png")
    for i, size in enumerate([(128, 40), (64, 64)]):
        save_image(data / "1_sks thing" / f"good {i}.png", size, seed=i)
        (data / "1_sks thing" / f"good {i}.txt").write_text(f"sks thing, shape {i}, red, small")
    for i in range(2):
        save_image(tmp_path / "reg" / "1_thing" / f"reg {i}.png", (64, 64), seed=30 + i)
    args = sets(pretrained_model_name_or_path=str(tiny_sd1_dir), train_data_dir=str(data),
                reg_data_dir=str(tmp_path / "reg"), prior_loss_weight=0.5, output_dir=str(tmp_path / "out"),
                max_train_epochs=1, resolution="64", enable_bucket=True, min_bucket_reso=32, max_bucket_reso=128,
                bucket_reso_steps=32, train_batch_size=2, shuffle_caption=True, keep_tokens=1,
                caption_tag_dropout_rate=0.1, max_data_loader_n_workers=1, network_dim=4, learning_rate=1e-3,
                network_train_unet_only=True)
    return tmp_path / "run", run_trainer(args, tmp_path / "run")


@pytest.mark.slow
def test_training_over_a_folder_of_good_and_bad_files_completes(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    from safetensors import safe_open

    run_dir, result = run_mixed_folder_training(tiny_sd1_dir, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    warnings = [e["message"] for e in events if e["type"] == "warning"]
    assert any("3 file(s) skipped" in w for w in warnings)
    assert any("fails late.png" in w and "another image of its bucket was trained instead" in w for w in warnings)
    dataset = next(e for e in events if e["type"] == "dataset")
    assert dataset["num_skipped"] == 3 and len(dataset["buckets"]) == 3
    start = next(e for e in events if e["type"] == "start")
    progress = [e for e in events if e["type"] == "progress"]
    # 64x64: 3 training + 5 balanced reg samples in 4 batches of 2; 32x96 and 96x32: one batch each
    assert len(progress) == start["plan"]["total_steps"] == dataset["plan"]["total_steps"] == 6
    assert events[-1]["type"] == "done"
    with safe_open(str(tmp_path / "out" / "lora.safetensors"), "pt") as f:
        meta = f.metadata()
    assert meta["ss_enable_bucket"] == "True" and json.loads(meta["ss_reg_dataset_dirs"]) == {
        "1_thing": {"n_repeats": 1, "img_count": 2}}
    assert int(meta["ss_num_reg_images"]) == int(meta["ss_num_train_images"]) == 5
