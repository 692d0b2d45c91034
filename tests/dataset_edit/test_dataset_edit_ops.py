"""The Dataset tab's torch-free logic: opening each layout, every bulk operation previewed then written, undo,
concept folders and moves, and the statistics."""
from __future__ import annotations

import codecs
import json
from pathlib import Path

import pytest

from image_files import save_image
from trainers.data.buckets import BucketSettings
from trainers.dataset_edit.backups import list_backups, undo_last
from trainers.dataset_edit.concepts import create_concept, move_images
from trainers.dataset_edit.edits import caption_edit, describe, preview, write_changes
from trainers.dataset_edit.folders import BACKUP_DIR, DatasetEditError, open_dataset
from trainers.dataset_edit.stats import dataset_stats, token_counter
from trainers.dataset_edit.tags import BulkOp



@pytest.fixture
def kohya(tmp_path: Path) -> Path:
    """10_sks dog: a.png 'dog, red, dog', b.png 'a dog on grass' (UTF-16 with a mark), c.png no caption;
    2_cat: d.png 'cat, Red'; broken.png is not an image."""
    root = tmp_path / "data"
    dog, cat = root / "10_sks dog", root / "2_cat"
    save_image(dog / "a.png", (64, 96), seed=1)
    (dog / "a.txt").write_text("dog, red, dog", encoding="utf-8")
    save_image(dog / "b.png", (96, 64), seed=2)
    (dog / "b.txt").write_bytes(codecs.BOM_UTF16_LE + "a dog on grass".encode("utf-16-le"))
    save_image(dog / "c.png", (32, 32), seed=1)  # the same pixels as a.png, another size: not a duplicate
    save_image(cat / "d.png", (64, 64), seed=4)
    (cat / "d.txt").write_text("cat, Red", encoding="utf-8")
    (cat / "broken.png").write_bytes(b"not a png at all")
    return root


def captions(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.txt")) if BACKUP_DIR not in str(p)}


def test_opens_kohya_flat_and_toml_layouts(kohya: Path, tmp_path: Path) -> None:
    data = open_dataset(kohya)
    assert data.layout == "kohya"
    assert [(c.folder.name, c.repeats, c.tokens) for c in data.concepts] == [("10_sks dog", 10, "sks dog"),
                                                                            ("2_cat", 2, "cat")]
    by_name = {e.image.name: e for e in data.entries}
    assert sorted(by_name) == ["a.png", "b.png", "broken.png", "c.png", "d.png"]
    assert by_name["b.png"].caption == "a dog on grass" and "byte-order mark" in by_name["b.png"].encoding
    assert not by_name["c.png"].has_caption and by_name["a.png"].size == (64, 96)
    assert "not an image" in by_name["broken.png"].problem  # listed, and skipped by edits and statistics
    assert "broken.png" not in {e.image.name for e in data.readable}

    flat = open_dataset(kohya / "2_cat")
    assert flat.layout == "flat" and [e.image.name for e in flat.entries] == ["broken.png", "d.png"]

    toml = tmp_path / "dataset.toml"
    toml.write_text(f'[[datasets]]\n[[datasets.subsets]]\nimage_dir = "{kohya / "2_cat"}"\nnum_repeats = 3\n'
                    'class_tokens = "cat"\n', encoding="utf-8")
    from_toml = open_dataset(toml)
    assert from_toml.layout == "toml" and from_toml.root == tmp_path
    assert [(c.repeats, c.tokens) for c in from_toml.concepts] == [(3, "cat")]
    assert {e.image.name for e in from_toml.readable} == {"d.png"}


def test_open_names_the_problem(tmp_path: Path) -> None:
    with pytest.raises(DatasetEditError, match="does not exist"):
        open_dataset(tmp_path / "nowhere")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(DatasetEditError, match="is a file"):
        open_dataset(tmp_path / "x.json")
    with pytest.raises(DatasetEditError, match="caption extension: invalid caption_extension 'a/b'"):
        open_dataset(tmp_path, "a/b")
    assert open_dataset(tmp_path, "caption").caption_extension == ".caption"


@pytest.mark.parametrize("op, expected", [
    (BulkOp("trigger", "sks"), {"a.png": "sks, dog, red, dog", "b.png": "sks, a dog on grass", "c.png": "sks",
                                "d.png": "sks, cat, Red"}),
    (BulkOp("prefix", "photo of "), {"a.png": "photo of dog, red, dog", "b.png": "photo of a dog on grass",
                                     "c.png": "photo of ", "d.png": "photo of cat, Red"}),
    (BulkOp("suffix", ", best"), {"a.png": "dog, red, dog, best", "b.png": "a dog on grass, best",
                                  "c.png": ", best", "d.png": "cat, Red, best"}),
    (BulkOp("replace", "dog", "wolf"), {"a.png": "wolf, red, wolf", "b.png": "a wolf on grass"}),
    (BulkOp("remove_tag", "RED"), {"a.png": "dog, dog", "d.png": "cat"}),
    (BulkOp("rename_tag", "red", "crimson"), {"a.png": "dog, crimson, dog", "d.png": "cat, crimson"}),
    (BulkOp("dedupe"), {"a.png": "dog, red"}),
    (BulkOp("fix_encoding"), {"b.png": "a dog on grass"}),
])
def test_bulk_op_previews_writes_utf8_and_undoes(kohya: Path, op: BulkOp, expected: dict[str, str]) -> None:
    before = captions(kohya)
    data = open_dataset(kohya)
    changes = preview(data, op)
    assert {c.entry.image.name: c.after for c in changes} == expected
    assert captions(kohya) == before  # a preview writes nothing
    backup = write_changes(data, changes, describe(op, len(changes)))
    assert backup is not None and backup.folder.parent == kohya / BACKUP_DIR
    reopened = {e.image.name: e for e in open_dataset(kohya).entries}
    for name, text in expected.items():
        assert reopened[name].caption_file.read_bytes() == text.encode("utf-8")  # UTF-8, no mark
        assert reopened[name].encoding == ""
    assert [b.what for b in list_backups(data)] == [describe(op, len(changes))]
    undone = undo_last(open_dataset(kohya))
    assert undone.name == backup.name
    assert captions(kohya) == before  # the UTF-16 file too, byte for byte; a caption file made for c.png is gone
    assert not (kohya / "10_sks dog" / "c.txt").exists()
    assert list_backups(data) == []


def test_bulk_op_on_chosen_images_and_bad_arguments(kohya: Path) -> None:
    data = open_dataset(kohya)
    chosen = [kohya / "2_cat" / "d.png"]
    assert [c.after for c in preview(data, BulkOp("trigger", "sks"), chosen)] == ["sks, cat, Red"]
    with pytest.raises(DatasetEditError, match="give the text"):
        preview(data, BulkOp("trigger", " "))
    with pytest.raises(DatasetEditError, match="new tag name"):
        preview(data, BulkOp("rename_tag", "red"))
    with pytest.raises(DatasetEditError, match="unknown"):
        preview(data, BulkOp("shout"))
    with pytest.raises(DatasetEditError, match="not an image of the dataset"):
        preview(data, BulkOp("dedupe"), [kohya / "elsewhere.png"])


def test_fix_encoding_rewrites_a_legacy_file_only_when_asked(kohya: Path) -> None:
    legacy = kohya / "2_cat" / "d.txt"
    legacy.write_bytes("café, crème".encode("cp1252"))
    data = open_dataset(kohya)
    entry = data.entry(kohya / "2_cat" / "d.png")
    assert entry.caption == "café, crème" and "Windows-1252" in entry.encoding
    write_changes(data, preview(data, BulkOp("trigger", "sks"), [entry.image]), "trigger")  # any edit: UTF-8
    assert legacy.read_text(encoding="utf-8") == "sks, café, crème"
    undo_last(data)
    assert legacy.read_bytes() == "café, crème".encode("cp1252")  # untouched until asked
    changes = preview(open_dataset(kohya), BulkOp("fix_encoding"))
    assert sorted(c.entry.image.name for c in changes) == ["b.png", "d.png"] and all(c.reencode_only for c in changes)


def test_caption_edit_in_place_and_undo(kohya: Path) -> None:
    data = open_dataset(kohya)
    image = kohya / "10_sks dog" / "c.png"
    assert caption_edit(data, kohya / "10_sks dog" / "a.png", "dog, red, dog") == []  # unchanged: nothing to do
    backup = write_changes(data, caption_edit(data, image, "sks dog, sitting"), "edit c.png")
    assert (kohya / "10_sks dog" / "c.txt").read_text(encoding="utf-8") == "sks dog, sitting"
    manifest = json.loads((backup.folder / "manifest.json").read_text())
    assert manifest["files"] == [["10_sks dog/c.txt", None]]  # a new file: undo removes it
    undo_last(data)
    assert not (kohya / "10_sks dog" / "c.txt").exists()
    with pytest.raises(DatasetEditError, match="nothing to undo"):
        undo_last(data)


def test_concepts_create_and_move_with_undo(kohya: Path) -> None:
    data = open_dataset(kohya)
    puppy = create_concept(data, "sks puppy", 5)
    assert puppy.folder == kohya / "5_sks puppy" and puppy.folder.is_dir()
    with pytest.raises(DatasetEditError, match="exists already"):
        create_concept(data, "sks puppy", 5)
    with pytest.raises(DatasetEditError, match="repeats"):
        create_concept(data, "x", 0)
    with pytest.raises(DatasetEditError, match="not a kohya dataset"):
        create_concept(open_dataset(kohya / "2_cat"), "x", 1)
    move_images(data, [kohya / "10_sks dog" / "a.png", kohya / "10_sks dog" / "c.png"], puppy)
    assert sorted(p.name for p in puppy.folder.iterdir()) == ["a.png", "a.txt", "c.png"]
    assert {e.image.name: e.concept.repeats for e in open_dataset(kohya).entries}["a.png"] == 5
    (kohya / "10_sks dog" / "a.png").write_bytes(b"")  # a new file took the old name: the move is not undone
    with pytest.raises(DatasetEditError, match="exists again"):
        undo_last(data)
    (kohya / "10_sks dog" / "a.png").unlink()
    undo_last(data)
    assert sorted(p.name for p in (kohya / "10_sks dog").iterdir()) == ["a.png", "a.txt", "b.png", "b.txt", "c.png"]
    save_image(puppy.folder / "b.png", (8, 8))
    with pytest.raises(DatasetEditError, match="exists already in 5_sks puppy"):
        move_images(data, [kohya / "10_sks dog" / "b.png"], puppy)
    assert (kohya / "10_sks dog" / "b.png").exists()


def test_stats_buckets_small_images_tokens_and_duplicates(kohya: Path) -> None:
    save_image(kohya / "2_cat" / "twin.png", (64, 64), seed=4)  # the same bytes as d.png
    data = open_dataset(kohya)
    settings = BucketSettings((64, 64), enable=True, min_reso=32, max_reso=128, steps=32)
    stats = dataset_stats(data, settings, token_counter(), limit=3)
    # the trainer's nearest-ratio choice: 64x96 -> 32x96, 96x64 -> 64x64; images x repeats per bucket
    assert stats.histogram() == [("32x96", 1, 10), ("64x64", 4, 10 + 10 + 2 + 2)]
    assert [e.image.name for e, _ in stats.upscaled] == ["c.png"]  # 32x32 into a 64x64 bucket
    assert [e.image.name for e in stats.unreadable] == ["broken.png"]
    assert [sorted(e.image.name for e in group) for group in stats.duplicates] == [["d.png", "twin.png"]]
    lengths = {e.image.name: n for e, n in stats.lengths}
    assert lengths["a.png"] == 5 and lengths["c.png"] == 2  # "dog , red , dog"; no caption: the tokens "sks dog"
    assert {e.image.name for e, _ in stats.over_limit} == {"a.png", "b.png"}
    assert "estimate" in stats.tokenizer


def test_token_counts_with_the_demo_models_tokenizer(kohya: Path, built_demo: Path) -> None:
    counter = token_counter(str(built_demo / "tiny-sd1"))
    assert "CLIP tokenizer" in counter.how
    assert counter.count("a b") > 0 and counter.count("") == 0


def test_bucket_histogram_is_what_the_trainer_builds(tmp_path: Path) -> None:
    """The tab's histogram and the trainer's catalog put every image in the same bucket."""
    from trainers.data.catalog import build_catalog
    from trainers.dataset_edit.folders import option_defaults
    from trainers.dataset_edit.stats import training_buckets

    root = tmp_path / "data"
    for number, size in enumerate([(640, 480), (480, 640), (512, 512), (900, 300), (300, 200)]):
        save_image(root / "3_thing" / f"{number}.png", size, seed=number)
    stats = dataset_stats(open_dataset(root), training_buckets("512", True), token_counter())
    catalog = build_catalog({**option_defaults(), "train_data_dir": str(root), "resolution": "512",
                             "enable_bucket": True})
    trained = {image.path.name: image.bucket for image in catalog.images}
    assert {e.image.name: bucket for bucket, found in stats.buckets.items() for e in found} == trained
    assert sorted(e.image.name for e, _ in stats.upscaled) == ["4.png"]  # 300x200 is enlarged
    with pytest.raises(DatasetEditError, match="resolution: got 'big'"):
        training_buckets("big", True)
