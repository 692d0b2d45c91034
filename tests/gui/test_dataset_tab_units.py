"""The Dataset tab's pieces without a browser: thumbnails kept within their cap."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import gui.dataset_tab as dataset_tab
from image_files import save_image


@pytest.fixture()
def thumbs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "thumbs"
    monkeypatch.setattr(dataset_tab, "THUMBS", folder)
    return folder


def test_thumbnails_are_pruned_by_age_then_least_recently_shown(tmp_path: Path, thumbs: Path) -> None:
    images = [tmp_path / f"im{i}.png" for i in range(4)]
    for i, image in enumerate(images):
        save_image(image, (300, 200), seed=i)
    made = [Path(dataset_tab.thumbnail(image)) for image in images]
    now = time.time()
    for age_days, thumb in zip((30, 3, 2, 1), made):
        os.utime(thumb, (now - age_days * 86400, now - age_days * 86400))
    dataset_tab.thumbnail(images[1])  # shown again now: the newest
    assert dataset_tab.prune_thumbnails(max_bytes=10**9) == 1  # the one not shown for 30 days
    assert not made[0].exists()
    one = made[1].stat().st_size
    assert dataset_tab.prune_thumbnails(max_bytes=one + 1) == 2  # the least recently shown go first
    assert sorted(thumbs.iterdir()) == [made[1]]
    assert dataset_tab.thumbnail(images[0]) == str(made[0])  # a removed one is made again when shown
