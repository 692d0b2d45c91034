"""Metadata JSON datasets: every filter and transform, and the counts of images kept and dropped per reason."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainers.core.options import TrainConfig, load_config
from trainers.data import metadata_json as mj
from trainers.data.catalog import build_catalog
from trainers.data.dataset import CaptionedImages
from trainers.preflight.report import preflight
from trainers.preflight.validate import validate

from image_files import save_image


def record(root: Path, name: str, tags: list[str], score: object, image: bool = True, **extra: object) -> None:
    folder = root / "boards" / name[:1]
    if image:
        save_image(folder / "img" / f"{name}.png", (64, 64), seed=len(name))
    data = {"path": f"img/{name}.png", "tags": tags, **({"score": score} if score is not None else {}), **extra}
    (folder / f"{name}.json").parent.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(data))


@pytest.fixture
def boards(tmp_path: Path) -> Path:
    record(tmp_path, "good", ["1girl", "long hair", "artist:foo", "watermark", "smile"], 8, source="ignored key")
    record(tmp_path, "lowabs", ["1girl"], 1)
    record(tmp_path, "lowres", ["1girl", "lowres"], 9)
    record(tmp_path, "anatomy", ["bad anatomy"], 9)  # blacklisted in its replaced form
    record(tmp_path, "bonus", ["masterpiece", "1girl"], 4)  # 4 + 2 bonus reaches min_score 5
    record(tmp_path, "nobonus", ["1girl"], 4)
    record(tmp_path, "missing", ["1girl"], 9, image=False)
    record(tmp_path, "noscore", ["1girl"], None)
    (tmp_path / "boards" / "x").mkdir(parents=True)
    (tmp_path / "boards" / "x" / "broken.json").write_text("{not json")
    return tmp_path / "boards"


FILTERS = {"metadata_abs_min_score": 3.0, "metadata_min_score": 5.0, "metadata_tag_bonus": ["masterpiece=2"],
           "metadata_blacklist_tags": ["lowres", "bad_anatomy"], "metadata_remove_tags": ["watermark"],
           "metadata_tag_replacements": [" ->_", ":->="], "metadata_score_tags": ["5", "7", "9"]}


def metadata_cfg(boards: Path, **extra: object) -> TrainConfig:
    return TrainConfig("lora", {"metadata_dir": str(boards), "resolution": "64", "max_train_epochs": 1,
                                **FILTERS, **extra})


def test_every_filter_and_its_count(boards: Path) -> None:
    catalog = build_catalog(metadata_cfg(boards).values)
    (subset,) = catalog.subsets
    assert subset.metadata_files == 9
    assert dict(subset.metadata_dropped) == {
        mj.BELOW_ABS: 1, mj.BLACKLISTED: 2, mj.BELOW_MIN: 1, mj.NOT_FOUND: 1, mj.BAD_FIELDS: 1, mj.BAD_JSON: 1}
    captions = {image.path.stem: image.caption for image in catalog.images}
    assert captions == {
        "good": "scr7, 1girl, long_hair, artist=foo, smile",  # score tag first, replaced, watermark removed
        "bonus": "masterpiece, 1girl",  # raw score 4 reaches no score tag
    }


def test_tag_separator_every_nth_and_repeats(boards: Path) -> None:
    cfg = metadata_cfg(boards, metadata_tag_separator=" ", metadata_consider_every_nth=2, dataset_repeats=3)
    catalog = build_catalog(cfg.values)
    (subset,) = catalog.subsets
    assert subset.metadata_dropped[mj.NOT_NTH] == 4  # 9 files sorted by path: 0, 2, 4, 6, 8 are read
    assert sum(subset.metadata_dropped.values()) + len(subset.images) == 9
    assert all(" " in image.caption and "," not in image.caption for image in catalog.images)
    assert len(catalog.samples) == 3 * len(catalog.images)


def test_shuffle_tag_p_shuffles_that_share_of_samples(tmp_path: Path) -> None:
    tags = [f"tag{i}" for i in range(8)]
    record(tmp_path, "one", tags, 5)
    catalog = build_catalog(TrainConfig("lora", {"metadata_dir": str(tmp_path / "boards"), "resolution": "64",
                                                 "metadata_shuffle_tag_p": 0.3}).values)
    dataset = CaptionedImages(catalog, lambda caps: [], seed=0)
    captions = [dataset.caption(epoch, 0) for epoch in range(400)]
    shuffled = sum(c != ", ".join(tags) for c in captions) / 400
    assert 0.2 < shuffled < 0.4


def test_filter_values_are_checked_with_a_fix(boards: Path) -> None:
    cfg = metadata_cfg(boards, metadata_tag_bonus=["masterpiece"], metadata_tag_replacements=["_"],
                       metadata_score_tags=["high"])
    issues = {i.field: i.message for i in validate(cfg, check_paths=False)}
    assert "'tag=number'" in issues["metadata_tag_bonus"]
    assert "'old->new'" in issues["metadata_tag_replacements"]
    assert "score thresholds" in issues["metadata_score_tags"]
    assert load_config("lora", overrides=['in_json="meta.json"']).in_json == "meta.json"  # sd-scripts' one file


def test_preflight_reports_kept_and_dropped(boards: Path, tmp_path: Path) -> None:
    report = preflight(metadata_cfg(boards, pretrained_model_name_or_path="org/model", output_dir=str(tmp_path)))
    assert report.ok, report.text()
    text = report.text()
    assert "[metadata] boards" in text and "9 JSON file(s), 2 image(s) kept" in text
    assert f"dropped: 2 x {mj.BLACKLISTED}" in text and f"dropped: 1 x {mj.BAD_JSON}" in text
    assert report.subsets[0].metadata_dropped[mj.BELOW_MIN] == 1
