"""The Dataset tab's pieces without a browser: thumbnails kept within their cap, masks over the images."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import gui.dataset_tab as dataset_tab
import gui.thumbnails as thumbnails
from image_files import save_image


@pytest.fixture()
def thumbs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "thumbs"
    monkeypatch.setattr(thumbnails, "THUMBS", folder)
    return folder


def test_thumbnails_are_pruned_by_age_then_least_recently_shown(tmp_path: Path, thumbs: Path) -> None:
    images = [tmp_path / f"im{i}.png" for i in range(4)]
    for i, image in enumerate(images):
        save_image(image, (300, 200), seed=i)
    made = [Path(thumbnails.thumbnail(image)) for image in images]
    now = time.time()
    for age_days, thumb in zip((30, 3, 2, 1), made):
        os.utime(thumb, (now - age_days * 86400, now - age_days * 86400))
    thumbnails.thumbnail(images[1])  # shown again now: the newest
    assert thumbnails.prune_thumbnails(max_bytes=10**9) == 1  # the one not shown for 30 days
    assert not made[0].exists()
    one = made[1].stat().st_size
    assert thumbnails.prune_thumbnails(max_bytes=one + 1) == 2  # the least recently shown go first
    assert sorted(thumbs.iterdir()) == [made[1]]
    assert thumbnails.thumbnail(images[0]) == str(made[0])  # a removed one is made again when shown


def test_gallery_shows_the_masks_a_mask_job_wrote(tmp_path: Path, thumbs: Path) -> None:
    """A mask job over the dataset writes `<dataset>_masks/<concept>/<name>.png`: the gallery tints red what the mask
    leaves out of the loss, and shows the image unchanged where no mask is."""
    from PIL import Image

    concept = tmp_path / "data" / "5_sks fox"
    concept.mkdir(parents=True)
    for name in ("masked", "plain"):
        Image.new("RGB", (64, 64), (128, 128, 128)).save(concept / f"{name}.png")
        (concept / f"{name}.txt").write_text(f"fox {name}", encoding="utf-8")
    before = dataset_tab.gallery_items(tmp_path / "data")
    masks = tmp_path / "data_masks" / "5_sks fox"
    masks.mkdir(parents=True)
    mask = Image.new("L", (64, 64), 255)
    mask.paste(0, (0, 0, 32, 64))  # the left half left out of the loss
    mask.save(masks / "masked.png")
    after = dataset_tab.gallery_items(tmp_path / "data")
    assert [caption for _, caption in after] == ["fox masked · masked", "fox plain"]
    assert after[1] == before[1]
    with Image.open(after[0][0]) as thumb:
        left, right = thumb.convert("RGB").getpixel((4, 32)), thumb.convert("RGB").getpixel((60, 32))
    assert left[0] > left[1] + 60  # red over the left-out half
    assert abs(right[0] - right[1]) < 8  # the kept half unchanged grey


def test_a_dataset_toml_subset_shows_the_masks_of_its_conditioning_data_dir(tmp_path: Path, thumbs: Path) -> None:
    """A subset's own masks folder (conditioning_data_dir, read with masked_loss) is where the gallery finds its
    masks: the file with the image's stem, any image extension, as training finds it."""
    from PIL import Image

    images, own_masks = tmp_path / "photos", tmp_path / "my masks"
    images.mkdir()
    own_masks.mkdir()
    for name in ("masked", "plain"):
        Image.new("RGB", (64, 64), (128, 128, 128)).save(images / f"{name}.png")
    Image.new("L", (64, 64), 0).save(own_masks / "masked.jpg")  # all left out of the loss
    (tmp_path / "photos_masks").mkdir()  # the default place holds another mask: the subset's folder wins
    Image.new("L", (64, 64), 255).save(tmp_path / "photos_masks" / "plain.png")
    toml = tmp_path / "dataset.toml"
    toml.write_text('[[datasets]]\n[[datasets.subsets]]\nimage_dir = "photos"\nclass_tokens = "fox"\n'
                    'conditioning_data_dir = "my masks"\n', encoding="utf-8")
    shown = dataset_tab.gallery_items(toml)
    assert [caption for _, caption in shown] == ["(no caption: 'fox') · masked", "(no caption: 'fox')"]
    with Image.open(shown[0][0]) as thumb:
        pixel = thumb.convert("RGB").getpixel((32, 32))
    assert pixel[0] > pixel[1] + 60  # red all over: the whole image is left out
