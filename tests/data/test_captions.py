"""Caption options as sd-scripts has them: extension, keep tokens, shuffle, dropout, prefix and suffix."""
from __future__ import annotations

import random
from pathlib import Path

from trainers.core.options import TrainConfig
from trainers.data.captions import CaptionOptions, process_caption
from trainers.data.catalog import build_catalog
from trainers.data.dataset import CaptionedImages

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
