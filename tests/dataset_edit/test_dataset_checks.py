"""The dataset checks before training (trainers/dataset_edit/checks.py) and their one-click fixes (fixes.py): planted
exact and near duplicates found and distinct images left alone, images far below the resolution, bad captions, and
each fix applied then undone leaving every file as it was."""
from __future__ import annotations

import codecs
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from trainers.dataset_edit.backups import undo_last
from trainers.dataset_edit.checks import dataset_checks, near_duplicate_groups
from trainers.dataset_edit.fixes import SET_ASIDE_DIR, resave_utf8, set_aside_duplicates
from trainers.dataset_edit.folders import BACKUP_DIR, open_dataset
from trainers.dataset_edit.stats import dataset_stats, token_counter, training_buckets


def photo(seed: int, size: tuple[int, int] = (256, 192)) -> Image.Image:
    """A picture with shapes and shading (smooth colour fields, a little grain), as photos have: a perceptual hash
    of pure noise would say nothing."""
    rng = np.random.default_rng(seed)
    shapes = Image.fromarray(rng.integers(0, 255, (6, 8, 3), dtype=np.uint8)).resize(size, Image.Resampling.BICUBIC)
    grain = rng.integers(-12, 12, (size[1], size[0], 3))
    return Image.fromarray(np.clip(np.asarray(shapes, dtype=int) + grain, 0, 255).astype(np.uint8))


def files(root: Path) -> dict[str, bytes]:
    """Every file of the dataset but the backups and the set-aside folder, with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and BACKUP_DIR not in p.parts and SET_ASIDE_DIR not in p.parts}


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """10_fox: a.png with an exact copy a_copy.png and a half-size JPEG copy a_small.jpg; b.png and c.png distinct;
    tiny.png 64x48 (far below 256); captions: a UTF-16 one, a Windows-1252 one, a blank one, and 'a fox' on most.
    2_studio: two different pictures on one white backdrop (alike to a hash, not duplicates)."""
    root = tmp_path / "my data"
    fox = root / "10_fox"
    fox.mkdir(parents=True)
    photo(1).save(fox / "a.png")
    (fox / "a_copy.png").write_bytes((fox / "a.png").read_bytes())
    photo(1).resize((128, 96), Image.Resampling.LANCZOS).save(fox / "a_small.jpg", quality=75)
    photo(2).save(fox / "b.png")
    photo(3).save(fox / "c.png")
    photo(4, (64, 48)).save(fox / "tiny.png")
    for name in ("a", "a_copy", "a_small", "c"):
        (fox / f"{name}.txt").write_text("a fox", encoding="utf-8")
    (fox / "b.txt").write_bytes(codecs.BOM_UTF16_LE + "a fox, in snow".encode("utf-16-le"))
    (fox / "tiny.txt").write_bytes("a fox, caf\xe9".encode("cp1252"))
    studio = root / "2_studio"
    studio.mkdir()
    for name, x in (("left", 40), ("right", 170)):
        backdrop = np.full((256, 256), 245, np.uint8)
        backdrop[x:x + 48, x:x + 48] = 30
        Image.fromarray(backdrop).save(studio / f"{name}.png")
    (studio / "left.txt").write_text("   \n", encoding="utf-8")
    return root


def checks_of(root: Path):
    data = open_dataset(root)
    return data, dataset_checks(data, dataset_stats(data, training_buckets("256", True), token_counter(), 75))


def names(group) -> list[str]:
    return sorted(e.image.name for e in group)


def test_exact_and_near_duplicates_found_distinct_images_not(dataset: Path) -> None:
    _, checks = checks_of(dataset)
    assert [names(g) for g in checks.exact] == [["a.png", "a_copy.png"]]
    # the resized, re-encoded copy is found; the exact copy takes part through a.png only
    assert [names(g) for g in checks.near] == [["a.png", "a_small.jpg"]]
    flagged = {e.image.name for g in checks.exact + checks.near for e in g}
    assert not flagged & {"b.png", "c.png", "tiny.png", "left.png", "right.png"}


def test_an_edited_copy_is_still_a_near_duplicate(tmp_path: Path) -> None:
    photo(5).save(tmp_path / "one.png")
    brighter = np.clip(np.asarray(photo(5), dtype=int) + 25, 0, 255).astype(np.uint8)
    Image.fromarray(brighter).crop((3, 2, 253, 190)).save(tmp_path / "two.webp")
    photo(6).save(tmp_path / "other.png")
    assert [names(g) for g in near_duplicate_groups(open_dataset(tmp_path).readable)] == [["one.png", "two.webp"]]


def test_small_images_and_bad_captions_found(dataset: Path) -> None:
    _, checks = checks_of(dataset)
    # enlarged more than twice to their 256x256 bucket; the 256x192 images (1.33x) are not far below
    assert [(e.image.name, bucket) for e, bucket in checks.far_below] == [("a_small.jpg", (256, 256)),
                                                                         ("tiny.png", (256, 256))]
    assert names(checks.empty) == ["left.png"]  # blank caption file; right.png has none and trains with 'studio'
    assert [(s.concept.folder.name, s.caption, len(s.entries), s.of) for s in checks.shared] == [
        ("10_fox", "a fox", 4, 6)]
    assert names(checks.encoding) == ["b.png", "tiny.png"]
    long = open_dataset(dataset)
    assert dataset_checks(long, dataset_stats(long, training_buckets("256", True), token_counter(), 2)).over_limit


def test_move_duplicates_aside_then_undo(dataset: Path) -> None:
    before = files(dataset)
    data = open_dataset(dataset)
    backup = set_aside_duplicates(data, near=True, session="s1")
    assert backup is not None and "2" in backup.what
    left = {Path(p).name for p in files(dataset)}
    assert {"a.png", "a.txt", "b.png", "c.png"} <= left  # a.png is kept: the largest of its group
    assert not {"a_copy.png", "a_copy.txt", "a_small.jpg", "a_small.txt"} & left
    aside = dataset / SET_ASIDE_DIR / "10_fox"
    assert (aside / "a_small.jpg").read_bytes() == before["10_fox/a_small.jpg"]  # moved, not deleted
    assert (aside / "a_copy.txt").read_text(encoding="utf-8") == "a fox"
    again = open_dataset(dataset)
    assert "a_small.jpg" not in {e.image.name for e in again.entries}  # no run reads the set-aside folder
    assert not dataset_checks(again, dataset_stats(again, training_buckets("256", True), token_counter())).near

    undo_last(open_dataset(dataset), "s1")
    assert files(dataset) == before


def test_move_exact_duplicates_only(dataset: Path) -> None:
    set_aside_duplicates(open_dataset(dataset), near=False)
    left = {Path(p).name for p in files(dataset)}
    assert "a_copy.png" not in left and "a_small.jpg" in left


def test_resave_utf8_then_undo(dataset: Path) -> None:
    before = files(dataset)
    (dataset / "10_fox" / "c.txt").write_bytes(b"\x00\x01binary")  # not text: left alone, not made an empty caption
    before["10_fox/c.txt"] = b"\x00\x01binary"
    backup = resave_utf8(open_dataset(dataset), "s1")
    assert backup is not None and "2 caption" in backup.what
    assert (dataset / "10_fox" / "b.txt").read_bytes() == "a fox, in snow".encode("utf-8")
    assert (dataset / "10_fox" / "tiny.txt").read_bytes() == "a fox, café".encode("utf-8")
    assert (dataset / "10_fox" / "c.txt").read_bytes() == b"\x00\x01binary"
    _, checks = checks_of(dataset)
    assert names(checks.encoding) == ["c.png"]
    assert resave_utf8(open_dataset(dataset)) is None

    undo_last(open_dataset(dataset), "s1")
    assert files(dataset) == before


def test_a_picture_replaced_since_the_last_check_is_looked_at_again(tmp_path: Path) -> None:
    photo(7).save(tmp_path / "one.png")
    photo(7).resize((128, 96)).save(tmp_path / "two.jpg", quality=80)
    assert len(near_duplicate_groups(open_dataset(tmp_path).readable)) == 1
    photo(8).resize((128, 96)).save(tmp_path / "two.jpg", quality=80)  # another picture under the same name
    assert near_duplicate_groups(open_dataset(tmp_path).readable) == []
