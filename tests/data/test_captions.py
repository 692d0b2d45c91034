"""Caption options as sd-scripts has them: extension, keep tokens, shuffle, dropout, prefix and suffix; caption
files in every Unicode encoding an editor saves, and those that are not text named and not trained."""
from __future__ import annotations

import codecs
import json
import random
from pathlib import Path

import pytest

from trainers.core.options import TrainConfig
from trainers.data.captions import CaptionOptions, process_caption
from trainers.data.catalog import build_catalog
from trainers.data.dataset import CaptionedImages
from trainers.data.kohya_folders import DatasetLayoutError, scan_kohya_folders
from trainers.preflight.report import preflight

from image_files import save_image

CAPTION = "sks dog, red collar, grass, sunny day, running, park"


def variants(opts: CaptionOptions, n: int = 200, caption: str = CAPTION) -> list[str]:
    return [process_caption(caption, opts, random.Random(i)) for i in range(n)]


def test_shuffle_keeps_the_first_tokens_and_every_tag() -> None:
    out = variants(CaptionOptions(shuffle_p=1.0, keep_tokens=1))
    assert all(v.startswith("sks dog, ") for v in out)
    assert all(sorted(v.split(", ")) == sorted(CAPTION.split(", ")) for v in out)
    assert len(set(out)) > 20


def test_keep_tokens_separator_fixes_head_and_tail() -> None:
    caption = "sks dog, photo ||| grass, park, running ||| best quality"
    out = variants(CaptionOptions(shuffle_p=1.0, keep_tokens=5, keep_tokens_separator="|||"), caption=caption)
    assert all(v.startswith("sks dog, photo, ") and v.endswith(", best quality") for v in out)
    assert all("|||" not in v for v in out) and len(set(out)) == 6  # 3! orders of the middle
    assert process_caption(caption, CaptionOptions(keep_tokens_separator="|||"), random.Random(0)) == \
        "sks dog, photo, grass, park, running, best quality"


def test_caption_and_tag_dropout_rates() -> None:
    dropped = variants(CaptionOptions(dropout_rate=0.25), n=2000)
    assert 0.2 < dropped.count("") / 2000 < 0.3
    tags = variants(CaptionOptions(tag_dropout_rate=0.5, keep_tokens=1), n=500)
    assert all(v.startswith("sks dog") for v in tags)  # kept tags are never dropped
    mean_tags = sum(len(v.split(", ")) - 1 for v in tags) / 500
    assert 2.0 < mean_tags < 3.0  # half of the 5 other tags


def test_prefix_and_suffix_stay_outside_the_shuffle() -> None:
    out = variants(CaptionOptions(shuffle_p=1.0, prefix="masterpiece,", suffix=", by sks"))
    assert all(v.startswith("masterpiece, ") and v.endswith(", by sks") for v in out)
    assert process_caption("", CaptionOptions(prefix="sks"), random.Random(0)) == "sks"
    assert process_caption(CAPTION, CaptionOptions(dropout_rate=1.0, prefix="sks"), random.Random(0)) == ""


def test_fixed_captions_are_unchanged_and_cacheable() -> None:
    opts = CaptionOptions()
    assert opts.is_fixed and process_caption("a photo of sks dog", opts, random.Random(0)) == "a photo of sks dog"
    assert not CaptionOptions(shuffle_p=0.3).is_fixed and not CaptionOptions(tag_dropout_rate=0.1).is_fixed


def test_training_samples_get_their_caption_variant_per_epoch(tmp_path: Path) -> None:
    folder = tmp_path / "data" / "1_sks dog"
    save_image(folder / "a.png", (64, 64))
    (folder / "a.caption").write_text(CAPTION)
    save_image(folder / "b.png", (64, 64))
    (folder / "b.txt").write_text("ignored: not the caption extension")
    cfg = TrainConfig("lora", {"train_data_dir": str(tmp_path / "data"), "caption_extension": ".caption",
                               "shuffle_caption": True, "keep_tokens": 1, "caption_prefix": "photo,",
                               "resolution": "64"})
    catalog = build_catalog(cfg.values)
    dataset = CaptionedImages(catalog, lambda caps: [], seed=1)
    a = next(i for i in range(len(dataset)) if catalog.images[catalog.samples[i]].path.name == "a.png")
    b = 1 - a
    per_epoch = [dataset.caption(epoch, a) for epoch in range(6)]
    assert all(c.startswith("photo, sks dog, ") for c in per_epoch) and len(set(per_epoch)) > 1
    assert dataset.caption(0, a) == CaptionedImages(catalog, lambda caps: [], seed=1).caption(0, a)  # seeded
    assert dataset.caption(0, b) == "photo, sks dog"  # no .caption file: the folder's tokens


UNICODE_CAPTION = "sks dog, café, 猫, ✓ 🐕"
MARKED = {  # every way an editor saves Unicode text with a byte-order mark (Notepad's "Unicode" is UTF-16 LE)
    "UTF-8": codecs.BOM_UTF8 + UNICODE_CAPTION.encode("utf-8"),
    "UTF-16 LE": codecs.BOM_UTF16_LE + UNICODE_CAPTION.encode("utf-16-le"),
    "UTF-16 BE": codecs.BOM_UTF16_BE + UNICODE_CAPTION.encode("utf-16-be"),
    "UTF-32 LE": codecs.BOM_UTF32_LE + UNICODE_CAPTION.encode("utf-32-le"),
    "UTF-32 BE": codecs.BOM_UTF32_BE + UNICODE_CAPTION.encode("utf-32-be"),
    "UTF-8 without a mark": UNICODE_CAPTION.encode("utf-8"),
}
NOT_TEXT = {  # what must never be trained on as a caption
    "UTF-16 LE without a mark": UNICODE_CAPTION.encode("utf-16-le"),
    "UTF-32 BE without a mark": UNICODE_CAPTION.encode("utf-32-be"),
    "UTF-8 with a NUL": b"sks dog\x00, red collar",
    "UTF-16 cut in the middle of a character": codecs.BOM_UTF16_LE + UNICODE_CAPTION.encode("utf-16-le")[:-1],
}


def _folder_with_caption(root: Path, raw: bytes) -> Path:
    folder = root / "1_sks dog"
    save_image(folder / "a.png", (64, 64))
    (folder / "a.txt").write_bytes(raw)
    return folder / "a.txt"


@pytest.mark.parametrize("encoding", list(MARKED))
def test_a_caption_file_saved_with_a_byte_order_mark_is_read_as_it_says(tmp_path: Path, encoding: str) -> None:
    caption = _folder_with_caption(tmp_path, MARKED[encoding])
    scan = scan_kohya_folders(tmp_path)
    item = scan.subsets[0].images[0]
    assert item.caption == UNICODE_CAPTION and item.caption_from_file
    assert not [w for w in scan.warnings if caption.name in w]
    assert scan_kohya_folders(tmp_path, strict=True).subsets[0].images[0].caption == UNICODE_CAPTION


@pytest.mark.parametrize("kind", list(NOT_TEXT))
def test_a_caption_file_that_is_not_text_is_named_and_its_image_trains_without_it(tmp_path: Path, kind: str) -> None:
    caption = _folder_with_caption(tmp_path, NOT_TEXT[kind])
    scan = scan_kohya_folders(tmp_path)
    item = scan.subsets[0].images[0]
    assert (item.caption, item.caption_from_file) == ("sks dog", False)  # as without a caption file: the tokens
    [warning] = [w for w in scan.warnings if str(caption) in w]
    assert "skipped: its image trains as if it had no caption file" in warning and "save it as UTF-8" in warning
    assert ("NUL" in warning) != kind.startswith("UTF-16 cut")
    with pytest.raises(DatasetLayoutError, match="save it as UTF-8.*strict_captions") as err:
        scan_kohya_folders(tmp_path, strict=True)
    assert err.value.path == caption and str(caption) in str(err.value)


def test_validate_names_the_caption_file_it_cannot_train(tmp_path: Path) -> None:
    from gui.checks import check_form

    data = tmp_path / "data"
    broken = _folder_with_caption(data, NOT_TEXT["UTF-16 LE without a mark"])
    save_image(broken.parent / "b.png", (64, 64))
    (broken.parent / "b.txt").write_bytes(MARKED["UTF-16 LE"])
    values = {"train_data_dir": str(data), "resolution": "64", "pretrained_model_name_or_path": str(tmp_path)}
    report = preflight(TrainConfig("lora", values))
    expected = (f"caption file {broken} holds NUL characters: it was saved as UTF-16 or UTF-32 without a byte-order "
                "mark, or it is not text; skipped: its image trains as if it had no caption file. Fix: save it as "
                "UTF-8 text")
    assert expected in report.warnings and f"warning: {expected}" in report.text()
    assert not [w for w in report.warnings if "b.txt" in w]  # the UTF-16 file with its mark reads as it should
    assert expected in check_form("lora", values).warnings  # the page's Validate


def test_metadata_json_saved_as_utf16_is_read(tmp_path: Path) -> None:
    from trainers.core.options import config_from_dict

    save_image(tmp_path / "imgs" / "a.png", (64, 64))
    meta = tmp_path / "meta.json"
    meta.write_bytes(codecs.BOM_UTF16_LE + json.dumps({"a": {"caption": UNICODE_CAPTION}}).encode("utf-16-le"))
    cfg = config_from_dict("finetune", {"in_json": str(meta), "train_data_dir": str(tmp_path / "imgs"),
                                        "resolution": "64"})
    assert [image.caption for image in build_catalog(cfg.values).images] == [UNICODE_CAPTION]
    board = tmp_path / "boards" / "a.json"
    board.parent.mkdir()
    board.write_bytes(codecs.BOM_UTF16_BE + json.dumps({"path": "../imgs/a.png", "tags": ["猫"], "score": 5})
                      .encode("utf-16-be"))
    cfg = TrainConfig("lora", {"metadata_dir": str(board.parent), "resolution": "64"})
    assert [image.caption for image in build_catalog(cfg.values).images] == ["猫"]
