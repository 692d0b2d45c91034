"""validation_split holds images out of training as sd-scripts' split_train_val picks them."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from trainers.core.options import ConfigError, TrainConfig, config_from_dict
from trainers.data.catalog import build_catalog
from trainers.data.dataset import CaptionedImages
from trainers.data.holdout import held_out_count, split_images
from trainers.preflight.report import preflight
from trainers.preflight.validate import validate

from image_files import save_image


def _folder(root: Path, name: str, count: int, seed: int = 0) -> Path:
    for i in range(count):
        save_image(root / name / f"{i:02d}.png", (64, 64), seed=seed + i)
        (root / name / f"{i:02d}.txt").write_text(f"sks, picture {i}, {name}", encoding="utf-8")
    return root / name


def _sd_scripts_held_out(paths: list[str], split: float, seed: int) -> list[str]:
    """sd-scripts' validation half of split_train_val, written out for the comparison."""
    shuffled = sorted(paths)
    state = random.getstate()
    random.seed(seed)
    random.shuffle(shuffled)
    random.setstate(state)
    return shuffled[len(shuffled) - round(len(shuffled) * split):]


@pytest.fixture
def folders(tmp_path: Path) -> Path:
    _folder(tmp_path / "train", "2_dog", 10)
    _folder(tmp_path / "train", "1_cat", 3, seed=50)
    _folder(tmp_path / "reg", "1_animal", 4, seed=90)
    return tmp_path


def _values(root: Path, **extra: object) -> dict:
    return TrainConfig("lora", {"train_data_dir": str(root / "train"), "reg_data_dir": str(root / "reg"),
                                "resolution": "64", **extra}).values


def test_each_subset_holds_out_the_images_sd_scripts_would(folders: Path) -> None:
    catalog = build_catalog(_values(folders, validation_split=0.25, seed=7))
    held = {s.name: sorted(str(catalog.validation.images[i].path) for i in s.images)
            for s in catalog.validation.subsets}
    for name, count in (("2_dog", 10), ("1_cat", 3)):
        paths = [str(p) for p in (folders / "train" / name).glob("*.png")]
        assert held.get(name, []) == sorted(_sd_scripts_held_out(paths, 0.25, 7)), name
    assert (len(held["2_dog"]), "1_cat" in held) == (2, True)  # round(2.5) = 2; round(0.75) = 1
    trained = {s.name: (len(s.images), s.held_out) for s in catalog.subsets}
    assert trained == {"2_dog": (8, 2), "1_cat": (2, 1), "1_animal": (4, 0)}, "regularization images are never split"
    assert catalog.num_validation_images == 3
    # training never sees a held-out image: not among its images, so in no epoch's batches
    train_paths = {image.path for image in catalog.images}
    assert not train_paths & {image.path for image in catalog.validation.images}
    sampler = catalog.batch_sampler(2, seed=3)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        assert {catalog.images[catalog.samples[i]].path for batch in sampler for _, i, *_ in batch} <= train_paths
    # repeats and reg balancing count the training images only; held-out images appear once each
    assert catalog.num_train_samples == 8 * 2 + 2 and catalog.num_reg_samples == 18
    assert len(catalog.validation.samples) == 3


def test_the_split_follows_the_seed_and_validation_seed(folders: Path) -> None:
    def held(**values: object) -> set[str]:
        catalog = build_catalog(_values(folders, validation_split=0.3, **values))
        return {image.path.name + image.path.parent.name for image in catalog.validation.images}

    assert held(seed=1) == held(seed=1), "the same seed, the same split (and so on every process)"
    assert held(seed=1) != held(seed=2)
    assert held(seed=1, validation_seed=5) == held(seed=2, validation_seed=5), "validation_seed wins over seed"
    assert not build_catalog(_values(folders)).validation, "0 = no split"


def test_held_out_counts_and_disjointness() -> None:
    assert [held_out_count(n, 0.2) for n in (1, 2, 3, 8, 10)] == [0, 0, 1, 2, 2]
    assert held_out_count(5, 0.5) == 2 and held_out_count(7, 0.5) == 4  # Python's round, as sd-scripts
    for n in range(1, 30):
        for split in (0.05, 0.2, 0.3, 0.5, 0.7):
            train, held = split_images(list(range(n)), split, seed=n)
            assert not set(train) & set(held) and sorted(train + held) == list(range(n))
            assert len(held) == round(n * split) and train == sorted(train)


def test_held_out_images_are_read_without_augmentation(folders: Path) -> None:
    values = _values(folders, validation_split=0.5, flip_aug=True, color_aug=True, random_crop=True,
                     shuffle_caption=True, caption_dropout_rate=0.5, caption_tag_dropout_rate=0.5)
    catalog = build_catalog(values)
    for subset in catalog.validation.subsets:
        spec = subset.spec
        assert not (spec.flip_aug or spec.color_aug or spec.random_crop)
        assert not (spec.captions.shuffle_p or spec.captions.dropout_rate or spec.captions.tag_dropout_rate)
        assert subset.repeats == 1
    assert catalog.subsets[0].spec.flip_aug, "training keeps its augmentation"
    dataset = CaptionedImages(catalog.validation, lambda caps: [[0] for _ in caps], seed=0)
    written = {image.path.stem + image.path.parent.name: image.caption for image in catalog.validation.images}
    assert sorted(dataset.caption(e, i) for e in range(3) for i in range(len(dataset))) == sorted(
        list(written.values()) * 3), "captions exactly as written, every time"


def test_a_split_that_empties_a_subset_is_refused_by_name(folders: Path) -> None:
    with pytest.raises(ConfigError) as err:
        build_catalog(_values(folders, validation_split=0.9))
    message = str(err.value)
    assert "1_cat (3 image(s))" in message and "2_dog" not in message and "validation_split" in message
    issues = {i.field: i.message for i in validate(TrainConfig("lora", {"validation_split": 1.0}), check_paths=False)}
    assert "holds out every image" in issues["validation_split"]
    for name in ("validate_every_n_steps", "validate_every_n_epochs", "max_validation_steps"):
        with pytest.raises(ConfigError, match=name):
            config_from_dict("lora", {name: 0})


def test_dataset_config_levels_and_the_preflight_report(tmp_path: Path) -> None:
    _folder(tmp_path, "a", 8)
    _folder(tmp_path, "b", 4, seed=20)
    config = tmp_path / "dataset.toml"
    config.write_text("""
[general]
validation_split = 0.25
validation_seed = 3
[[datasets]]
resolution = 64
  [[datasets.subsets]]
  image_dir = "a"
[[datasets]]
resolution = 64
validation_split = 0.5
  [[datasets.subsets]]
  image_dir = "b"
""", encoding="utf-8")
    cfg = TrainConfig("lora", {"dataset_config": str(config), "max_train_steps": 2, "output_dir": str(tmp_path / "o"),
                               "pretrained_model_name_or_path": "some/model"})
    catalog = build_catalog(cfg.values)
    assert [(s.name, len(s.images), s.held_out) for s in catalog.subsets] == [("a", 6, 2), ("b", 2, 2)]
    expected = sorted(_sd_scripts_held_out([str(p) for p in (tmp_path / "a").glob("*.png")], 0.25, 3))
    assert sorted(str(i.path) for i in catalog.validation.images if i.path.parent.name == "a") == expected
    report = preflight(cfg)
    assert "6 training + 2 validation images" in report.text() and report.validation_images == 4
    assert "Validation: 4 held-out image(s)" in report.text()

    config.write_text(config.read_text().replace('  image_dir = "a"', '  image_dir = "a"\n  validation_split = 0.1'))
    with pytest.raises(ConfigError, match="validation_split belongs to \\[\\[datasets\\]\\] or \\[general\\]"):
        build_catalog(cfg.values)


def test_validate_every_without_a_split_is_pointed_out(folders: Path) -> None:
    cfg = TrainConfig("lora", {"train_data_dir": str(folders / "train"), "resolution": "64", "max_train_steps": 2,
                               "validate_every_n_steps": 5})
    report = preflight(cfg)
    assert any("validate_every_n_steps is set, but no image is held out" in w for w in report.warnings)
