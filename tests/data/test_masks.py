"""Loss masks: alpha channels (alpha_mask) and mask images (masked_loss), transformed with their image and cached."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from trainers.core.options import ConfigError, TrainConfig
from trainers.data import cache as cache_module
from trainers.data.cache import build_latent_cache
from trainers.data.catalog import build_catalog
from trainers.data.dataset import CaptionedImages, collate, flip_of
from trainers.data.kohya_folders import DatasetLayoutError

from image_files import save_image


def rgba(path: Path, size: tuple[int, int]) -> Path:
    """Noise whose left third is transparent."""
    w, h = size
    arr = np.random.default_rng(0).integers(0, 255, (h, w, 4), dtype=np.uint8)
    arr[:, :, 3] = 255
    arr[:, : w // 3, 3] = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr, "RGBA").save(path)
    return path


def grey_mask(path: Path, size: tuple[int, int], box: tuple[int, int, int, int]) -> Path:
    mask = Image.new("L", size, 0)
    mask.paste(255, box)
    path.parent.mkdir(parents=True, exist_ok=True)
    mask.save(path)
    return path


def items(catalog, seed: int = 0):
    dataset = CaptionedImages(catalog, lambda caps: [], seed=seed)
    return [(flip_of(catalog.subset_of(i).spec.flip_aug, seed, 0, i)[0], dataset[(0, i, 0)])
            for i in range(len(dataset))]


def test_alpha_mask_follows_resize_and_crop_and_the_pixels_stay_as_they_were(tmp_path: Path) -> None:
    rgba(tmp_path / "data" / "1_thing" / "a.png", (96, 128))  # to 64x85, cropped top and bottom
    save_image(tmp_path / "data" / "1_thing" / "b.png", (64, 64))  # no alpha: trains whole
    values = {"train_data_dir": str(tmp_path / "data"), "resolution": "64"}
    masked = items(build_catalog(TrainConfig("lora", {**values, "alpha_mask": True}).values))
    plain = items(build_catalog(TrainConfig("lora", values).values))
    for (_, item), (_, reference) in zip(masked, plain):
        assert torch.equal(item["pixels"], reference["pixels"])  # transparency is composited on white either way
    a, b = (item for _, item in masked)
    assert "mask" not in b
    mask = a["mask"][0]
    assert mask.shape == (64, 64)
    assert mask[:, :18].max() == 0.0 and mask[:, 24:].min() == 1.0  # the left third (32 of 96 pixels) is ignored
    batch = collate([a, b])
    assert batch["masks"].shape == (2, 1, 64, 64)
    assert torch.equal(batch["masks"][1], torch.ones(1, 64, 64))  # an image without a mask trains whole


def test_alpha_mask_flips_with_the_image(tmp_path: Path) -> None:
    rgba(tmp_path / "data" / "1_thing" / "a.png", (64, 64))
    values = {"train_data_dir": str(tmp_path / "data"), "resolution": "64", "alpha_mask": True, "flip_aug": True}
    catalog = build_catalog(TrainConfig("lora", values).values)
    dataset = CaptionedImages(catalog, lambda caps: [], seed=0)
    by_flip = {}
    for epoch in range(20):
        flipped = flip_of(True, 0, epoch, 0)[0]
        by_flip[flipped] = dataset[(epoch, 0, 0)]["mask"]
    assert set(by_flip) == {False, True}
    assert by_flip[False][0, :, :21].max() == 0.0 and by_flip[False][0, :, 21:].min() == 1.0
    assert torch.equal(by_flip[True], by_flip[False].flip(-1))


@pytest.fixture(scope="module")
def vae(tiny_sd1_dir: Path) -> torch.nn.Module:
    from diffusers import AutoencoderKL

    return AutoencoderKL.from_pretrained(tiny_sd1_dir / "vae").eval()


def masked_dataset(tmp_path: Path) -> dict[str, object]:
    """A kohya folder of three images with their masks in the same layout under masks/."""
    for i, size in enumerate([(64, 64), (96, 64), (64, 80)]):
        save_image(tmp_path / "data" / "2_thing" / f"img{i}.png", size, seed=i)
        grey_mask(tmp_path / "masks" / "2_thing" / f"img{i}.png", size, (0, 0, size[0] // 2, size[1]))
    return {"train_data_dir": str(tmp_path / "data"), "conditioning_data_dir": str(tmp_path / "masks"),
            "masked_loss": True, "resolution": "64"}


def test_mask_images_are_found_by_name_and_cropped_with_their_image(tmp_path: Path) -> None:
    values = masked_dataset(tmp_path)
    catalog = build_catalog(TrainConfig("lora", values).values)
    assert all(image.mask == tmp_path / "masks" / "2_thing" / image.path.name for image in catalog.images)
    for _, item in items(catalog):
        mask = item["mask"][0]
        assert mask.shape == (64, 64)
        assert mask[:, :20].min() == 1.0 and mask[:, -20:].max() == 0.0  # the left half is trained
    no_masks = build_catalog(TrainConfig("lora", {**values, "masked_loss": False, "conditioning_data_dir": ""}).values)
    assert all(image.mask is None for image in no_masks.images)


def test_missing_unusable_and_extra_masks(tmp_path: Path) -> None:
    values = masked_dataset(tmp_path)
    (tmp_path / "masks" / "2_thing" / "img1.png").rename(tmp_path / "masks" / "2_thing" / "IMG1.jpg.png")
    with pytest.raises(DatasetLayoutError) as err:
        build_catalog(TrainConfig("lora", values).values)
    assert err.value.field == "conditioning_data_dir" and "img1.png: no mask image" in str(err.value)
    assert "Fix:" in str(err.value)
    (tmp_path / "masks" / "2_thing" / "IMG1.jpg.png").unlink()
    Image.new("L", (10, 64)).save(tmp_path / "masks" / "2_thing" / "IMG1.webp")  # the stem's case may differ
    with pytest.raises(DatasetLayoutError, match=r"IMG1.webp is 10x64 but its image is 96x64"):
        build_catalog(TrainConfig("lora", values).values)
    Image.new("L", (48, 32), 255).save(tmp_path / "masks" / "2_thing" / "IMG1.webp")  # same aspect ratio: resized
    grey_mask(tmp_path / "masks" / "2_thing" / "stray.png", (8, 8), (0, 0, 4, 4))
    warnings: list[str] = []
    catalog = build_catalog(TrainConfig("lora", values).values, warnings)
    assert any("stray.png" in w and "match no training image" in w for w in warnings)
    assert {image.mask.name for image in catalog.images} == {"img0.png", "IMG1.webp", "img2.png"}
    resized = dict((catalog.images[catalog.samples[i]].path.name, item) for i, (_, item) in enumerate(items(catalog)))
    assert torch.equal(resized["img1.png"]["mask"], torch.ones(1, 64, 64))


def test_cached_masks_equal_the_area_average_and_disk_entries_follow_their_mask(tmp_path: Path, vae,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    values = masked_dataset(tmp_path)
    catalog = build_catalog(TrainConfig("lora", {**values, "flip_aug": True}).values)
    fresh = CaptionedImages(catalog, lambda caps: [], seed=0)
    for to_disk in (False, True):
        latents, failed = build_latent_cache(catalog, vae, to_disk=to_disk)
        assert not failed
        cached = CaptionedImages(catalog, lambda caps: [], seed=0, latents=latents)
        for epoch in range(4):
            for index in range(len(catalog.samples)):
                a, b = cached[(epoch, index, 0)], fresh[(epoch, index, 0)]
                expected = F.interpolate(b["mask"][None], size=a["latent_mean"].shape[-2:], mode="area")[0]
                assert torch.allclose(a["mask"], expected), (to_disk, epoch, index)
    written: list[Path] = []
    original = cache_module._write
    monkeypatch.setattr(cache_module, "_write", lambda path, entries, key: (written.append(path),
                                                                             original(path, entries, key)))
    build_latent_cache(catalog, vae, to_disk=True)
    assert written == []
    grey_mask(tmp_path / "masks" / "2_thing" / "img2.png", (64, 80), (0, 0, 10, 80))  # the user edits one mask
    build_latent_cache(build_catalog(TrainConfig("lora", {**values, "flip_aug": True}).values), vae, to_disk=True)
    assert [p.name for p in written] == ["img2.png.64x64.safetensors"]


def test_dataset_config_subsets_take_conditioning_data_dir_and_alpha_mask(tmp_path: Path) -> None:
    for i in range(2):
        save_image(tmp_path / "dogs" / f"dog{i}.png", (64, 64), seed=i)
        grey_mask(tmp_path / "dog masks" / f"dog{i}.png", (64, 64), (0, 0, 32, 64))
    rgba(tmp_path / "cats" / "cat.png", (64, 64))
    config = tmp_path / "dataset.toml"
    config.write_text("""
[[datasets]]
resolution = 64
  [[datasets.subsets]]
  image_dir = "dogs"
  conditioning_data_dir = "dog masks"
  [[datasets.subsets]]
  image_dir = "cats"
  alpha_mask = true
""")
    warnings: list[str] = []
    catalog = build_catalog(TrainConfig("lora", {"dataset_config": str(config), "masked_loss": True}).values,
                            warnings)
    assert not any("alpha_mask" in w for w in warnings)
    dogs, cats = catalog.subsets
    assert dogs.spec.masks == tmp_path / "dog masks" and cats.spec.alpha_mask and cats.spec.masks is None
    assert all("mask" in item for _, item in items(catalog))
    with pytest.raises(ConfigError, match="conditioning_data_dir holds mask images for masked_loss, which is off"):
        build_catalog(TrainConfig("lora", {"dataset_config": str(config)}).values)
    config.write_text(config.read_text().replace("alpha_mask = true", "conditioning_data_dir = \"nowhere\""))
    with pytest.raises(ConfigError, match="folder not found: nowhere"):
        build_catalog(TrainConfig("lora", {"dataset_config": str(config), "masked_loss": True}).values)
    config.write_text("[[datasets]]\nresolution = 64\n  [[datasets.subsets]]\n  image_dir = \"dogs\"\n")
    with pytest.raises(ConfigError, match="masked_loss: is on, but no subset of dataset_config has masks"):
        build_catalog(TrainConfig("lora", {"dataset_config": str(config), "masked_loss": True}).values)
