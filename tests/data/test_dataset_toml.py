"""sd-scripts dataset configs load as they are; regularization images are balanced as sd-scripts does."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainers.core.options import ConfigError, TrainConfig
from trainers.data.catalog import _balance_reg, build_catalog
from trainers.data.dataset import CaptionedImages

from image_files import save_image

REPO = Path(__file__).resolve().parents[2]

KOHYA_TOML = """
[general]
shuffle_caption = true
caption_extension = ".caption"
keep_tokens = 1

[[datasets]]
resolution = 64
batch_size = 2
enable_bucket = true
min_bucket_reso = 32
max_bucket_reso = 128
bucket_reso_steps = 32

  [[datasets.subsets]]
  image_dir = "dog"
  class_tokens = "sks dog"
  num_repeats = 2

  [[datasets.subsets]]
  image_dir = "reg dog"
  class_tokens = "dog"
  is_reg = true

[[datasets]]
resolution = [96, 64]
batch_size = 1

  [[datasets.subsets]]
  image_dir = "{abs_cat}"
  class_tokens = "sks cat"
  caption_extension = ".txt"
  color_aug = true
  face_crop_aug_range = [2.0, 4.0]
"""


@pytest.fixture
def kohya_dataset(tmp_path: Path) -> Path:
    for i in range(3):
        save_image(tmp_path / "dog" / f"dog{i}.png", (128, 48) if i else (48, 128), seed=i)
    (tmp_path / "dog" / "dog0.caption").write_text("sks dog, sitting, grass")
    for i in range(4):
        save_image(tmp_path / "reg dog" / f"reg{i}.png", (64, 64), seed=10 + i)
    for i in range(2):
        save_image(tmp_path / "cats" / f"cat{i}.png", (120, 80), seed=20 + i)
    (tmp_path / "cats" / "cat0.txt").write_text("sks cat, sleeping")
    config = tmp_path / "dataset.toml"
    config.write_text(KOHYA_TOML.replace("{abs_cat}", str(tmp_path / "cats")))
    return config


def test_kohya_dataset_config_loads_as_it_is(kohya_dataset: Path) -> None:
    warnings: list[str] = []
    cfg = TrainConfig("lora", {"dataset_config": str(kohya_dataset), "train_data_dir": "/elsewhere",
                               "prior_loss_weight": 0.5})
    catalog = build_catalog(cfg.values, warnings)
    assert [d.batch_size for d in catalog.datasets] == [2, 1]
    assert catalog.datasets[1].buckets.resolution == (96, 64) and not catalog.datasets[1].buckets.enable
    dog, reg, cat = catalog.subsets
    assert (dog.name, dog.repeats, dog.tokens, dog.is_reg, dog.dataset) == ("dog", 2, "sks dog", False, 0)
    assert reg.is_reg and cat.dataset == 1
    captions = {image.path.name: image.caption for image in catalog.images}
    assert captions["dog0.png"] == "sks dog, sitting, grass"  # .caption from [general]
    assert captions["dog1.png"] == "sks dog" and captions["cat0.png"] == "sks cat, sleeping"  # subset's .txt
    assert dog.captions.shuffle_p == 1.0 and dog.captions.keep_tokens == 1
    assert {image.bucket for image in catalog.images if image.subset == 0} == {(96, 32), (32, 96)}  # buckets on
    assert {image.bucket for image in catalog.images if image.subset == 2} == {(96, 64)}  # buckets off
    assert dog.samples == 6 and reg.samples == 6 and cat.samples == 2  # reg balanced within its dataset
    assert cat.spec.color_aug and not dog.spec.color_aug  # a subset key, as in sd-scripts
    assert any("face_crop_aug_range" in w and "ignored" in w for w in warnings)
    assert any("train_data_dir is ignored" in w for w in warnings)
    # every batch holds one dataset's bucket; reg samples train with prior_loss_weight
    sampler = catalog.batch_sampler(1, seed=0)
    assert all(len({catalog.bucket_of(i) for _, i, _ in batch}) == 1 for batch in sampler)
    dataset = CaptionedImages(catalog, lambda caps: [], seed=0, prior_loss_weight=0.5)
    weights = {catalog.subset_of(i).name: float(dataset[(0, i, 0)]["loss_weight"]) for i in range(len(dataset))}
    assert weights == {"dog": 1.0, "reg dog": 0.5, "cats": 1.0}


def test_reg_images_are_repeated_to_balance_like_sd_scripts() -> None:
    assert _balance_reg([(0, 1), (1, 1)], 5) == {0: 3, 1: 2}  # 2 reg images, 5 train samples
    assert _balance_reg([(0, 3), (1, 1)], 5) == {0: 4, 1: 1}  # repeats first, then one more each in turn
    assert _balance_reg([(i, 1) for i in range(10)], 3) == {0: 1, 1: 1, 2: 1}  # surplus reg images unused
    assert _balance_reg([], 5) == {}


def test_mistakes_in_a_dataset_config_are_all_named(tmp_path: Path) -> None:
    (tmp_path / "imgs").mkdir()
    config = tmp_path / "bad.toml"
    config.write_text("""
[general]
shufle_caption = true
[[datasets]]
resolution = 500
  [[datasets.subsets]]
  image_dir = "imgs"
  num_repeats = 0
  batch_size = 4
  [[datasets.subsets]]
  class_tokens = "no folder"
""")
    with pytest.raises(ConfigError) as err:
        build_catalog(TrainConfig("lora", {"dataset_config": str(config)}).values)
    messages = [i.message for i in err.value.issues]
    assert all(i.field == "dataset_config" for i in err.value.issues)
    text = "\n".join(messages)
    assert "did you mean 'shuffle_caption'" in text
    assert "resolution" in text and "multiples of 8" in text
    assert "num_repeats: got 0" in text
    assert "batch_size belongs to [[datasets]] or [general], not to a subset" in text
    assert "[[datasets.subsets]] #2: needs image_dir" in text


def test_cache_options_are_checked_against_each_subset(kohya_dataset: Path) -> None:
    cfg = TrainConfig("lora", {"dataset_config": str(kohya_dataset), "cache_text_encoder_outputs": True,
                               "network_train_unet_only": True})
    with pytest.raises(ConfigError, match="cache_text_encoder_outputs: .*shuffles or drops caption tags"):
        build_catalog(cfg.values)


@pytest.mark.slow
def test_preflight_command_reports_steps_for_the_process_count_without_torch(kohya_dataset: Path,
                                                                           tmp_path: Path) -> None:
    config = tmp_path / "run.toml"
    config.write_text(f'dataset_config = "{kohya_dataset}"\npretrained_model_name_or_path = "org/model"\n'
                      f'output_dir = "{tmp_path / "out"}"\nmax_train_epochs = 3\n')
    code = ("import sys; from trainers.__main__ import main; "
            f"rc = main(['preflight', '--config', {str(config)!r}, '--num-processes', '2', '--json']); "
            "assert 'torch' not in sys.modules, 'preflight imported torch'; sys.exit(rc)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr + result.stdout
    report = json.loads(result.stdout)
    assert report["ok"] and report["num_processes"] == 2
    # dataset 1 (global batch 2 x 2): 2 + 4 dog samples, 6 balanced reg samples; dataset 2 (global batch 2): 2
    assert report["train_samples"] == 8 and report["reg_samples"] == 6
    buckets = {(b["dataset"], b["width"], b["height"]): b["images"] for b in report["buckets"]}
    assert buckets == {(1, 32, 96): 1, (1, 96, 32): 2, (1, 64, 64): 4, (2, 96, 64): 2}
    assert report["steps_per_epoch"] == 1 + 1 + 2 + 1 and report["total_steps"] == 15
    assert any("fewer than batch 2 x 2 process(es)" in w for w in report["warnings"])
    text = subprocess.run([sys.executable, "-m", "trainers", "preflight", "--config", str(config)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and "Buckets:" in text.stdout and "OK: ready to train." in text.stdout
