"""Aspect-ratio buckets: the bucket list, which bucket an image lands in, and batches that never mix buckets."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from accelerate.data_loader import BatchSamplerShard

from trainers.core.options import TrainConfig
from trainers.core.plan import plan_steps
from trainers.data.buckets import BucketBatchSampler, BucketChooser, BucketSettings, bucket_resolutions
from trainers.data.catalog import build_catalog
from trainers.data.dataset import CaptionedImages, prepare_sample_image

from image_files import save_image

SD15 = BucketSettings((512, 512), enable=True, min_reso=256, max_reso=1024, steps=64)


def test_bucket_list_is_sd_scripts_list() -> None:
    resos = bucket_resolutions(SD15)
    assert (512, 512) in resos and (256, 1024) in resos and (1024, 256) in resos
    assert (320, 768) in resos and (384, 640) in resos and (448, 576) in resos  # as sd-scripts makes them
    for w, h in resos:
        assert w % 64 == 0 and h % 64 == 0 and 256 <= min(w, h) and max(w, h) <= 1024 and w * h <= 512 * 512
    assert len(resos) == len(set(resos))


def test_each_image_goes_to_the_bucket_nearest_its_aspect_ratio() -> None:
    chooser = BucketChooser(SD15)
    resos = bucket_resolutions(SD15)
    for size in [(1200, 800), (800, 1200), (4000, 1000), (640, 640), (300, 1000)]:
        bucket = chooser.choose(*size)
        best = min(abs(w / h - size[0] / size[1]) for w, h in resos)
        assert abs(bucket[0] / bucket[1] - size[0] / size[1]) == best
    assert chooser.choose(1200, 800)[0] > chooser.choose(1200, 800)[1]  # landscape stays landscape
    assert BucketChooser(BucketSettings((512, 512))).choose(1200, 800) == (512, 512)  # buckets off: resolution


def test_no_upscale_keeps_small_images_small() -> None:
    chooser = BucketChooser(BucketSettings((512, 512), enable=True, steps=64, no_upscale=True, max_reso=1024))
    assert chooser.choose(300, 200) == (256, 192)  # own size, rounded down to steps
    assert chooser.choose(40, 40) is None  # smaller than one step: skipped
    w, h = chooser.choose(2000, 2000)
    assert w * h <= 512 * 512 and w == h
    assert max(chooser.choose(6000, 400)) <= 1024  # long side capped at max_bucket_reso


@pytest.fixture
def shapes(tmp_path: Path) -> Path:
    """Landscape, portrait and square images in one kohya folder."""
    folder = tmp_path / "data" / "2_sks shapes"
    for i in range(5):
        save_image(folder / f"land{i}.png", (192, 96), seed=i)
    for i in range(3):
        save_image(folder / f"port{i}.png", (96, 192), seed=10 + i)
    for i in range(2):
        save_image(folder / f"square{i}.jpg", (128, 128), seed=20 + i)
    return tmp_path / "data"


def bucket_cfg(data: Path, **extra: object) -> TrainConfig:
    return TrainConfig("lora", {"train_data_dir": str(data), "resolution": "128", "enable_bucket": True,
                                "min_bucket_reso": 64, "max_bucket_reso": 256, "bucket_reso_steps": 32,
                                "train_batch_size": 2, **extra})


def test_images_are_trained_at_their_bucket_with_sdxl_crop_coordinates(shapes: Path) -> None:
    catalog = build_catalog(bucket_cfg(shapes).values)
    buckets = {image.path.stem[:4]: image.bucket for image in catalog.images}
    land, port, square = buckets["land"], buckets["port"], buckets["squa"]
    assert land[0] > land[1] and port[0] < port[1] and square == (128, 128)
    image = next(i for i in catalog.images if i.path.stem == "land0")
    prepared = prepare_sample_image(image, False, None, False)
    assert prepared.pixels.shape == (3, land[1], land[0])
    assert prepared.target_size == (land[1], land[0]) and prepared.original_size == (96, 192)
    scaled_w = round(192 * land[1] / 96)
    assert prepared.crop_top_left == (0, (scaled_w - land[0]) // 2)  # center crop of the resized image


def test_every_batch_comes_from_one_bucket_and_each_sample_is_seen_once(shapes: Path) -> None:
    catalog = build_catalog(bucket_cfg(shapes).values)
    assert len(catalog.samples) == 20  # 10 images x 2 repeats
    sampler = catalog.batch_sampler(num_processes=1, seed=7)
    first = None
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == sampler.groups_per_epoch() == len(sampler)
        for batch in batches:
            assert len({catalog.bucket_of(i) for _, i, _ in batch}) == 1
        seen = Counter(i for batch in batches for _, i, pad in batch if not pad)
        assert seen == Counter(range(20))
        order = [[i for _, i, _ in b] for b in batches]
        assert first is None or order != first  # reshuffled from seed + epoch
        first = first or order
    again = catalog.batch_sampler(num_processes=1, seed=7)
    again.set_epoch(0)
    assert [[i for _, i, _ in b] for b in again] == first


def shard(sampler: BucketBatchSampler, rank: int) -> list[list[tuple[int, int, int]]]:
    """What accelerate's prepare() hands process `rank` (batch sampler with no batch_size: whole batches)."""
    return list(BatchSamplerShard(sampler, num_processes=sampler.num_processes, process_index=rank))


@pytest.mark.parametrize("batch", [1, 2, 3])
def test_two_processes_train_the_same_bucket_each_step_and_every_sample_once(shapes: Path, batch: int) -> None:
    catalog = build_catalog(bucket_cfg(shapes, train_batch_size=batch).values)
    sampler = catalog.batch_sampler(num_processes=2, seed=3)
    rank0, rank1 = shard(sampler, 0), shard(sampler, 1)
    assert len(rank0) == len(rank1) == sampler.groups_per_epoch()
    for a, b in zip(rank0, rank1):
        assert len({catalog.bucket_of(i) for _, i, _ in a + b}) == 1  # same bucket on both processes
    trained = Counter(i for batch_ in rank0 + rank1 for _, i, pad in batch_ if not pad)
    assert trained == Counter(range(len(catalog.samples)))
    plan = plan_steps(len(catalog.samples), batch, 2, 1, 1, None, sampler.groups_per_epoch())
    assert plan.steps_per_epoch == len(rank0)  # the plan counts what actually runs


def test_two_processes_batch_one_group_like_one_process_batch_two(shapes: Path) -> None:
    """Per-sample seeding plus identical global batches: 2 x batch 1 trains what 1 x batch 2 does."""
    one = build_catalog(bucket_cfg(shapes, train_batch_size=2).values).batch_sampler(1, seed=5)
    two = build_catalog(bucket_cfg(shapes, train_batch_size=1).values).batch_sampler(2, seed=5)
    global_one = [sorted(i for _, i, p in batch if not p) for batch in one]
    global_two = [sorted(i for _, i, p, *_ in a + b if not p) for a, b in zip(shard(two, 0), shard(two, 1))]
    assert global_one == global_two


def test_partial_last_batch_pads_with_zero_loss_weight(shapes: Path) -> None:
    catalog = build_catalog(bucket_cfg(shapes, train_batch_size=1).values)
    square = [i for i in range(len(catalog.samples)) if catalog.bucket_of(i)[1:] == (128, 128)]
    assert len(square) == 4
    sampler = BucketBatchSampler([0] * 3, {0: 2}, num_processes=2, seed=0)
    groups = sampler.epoch_groups(0)
    assert [len(b) for g in groups for b in g] == [2, 1]  # 3 samples over 2 processes x batch 2
    sampler = BucketBatchSampler([0], {0: 1}, num_processes=2, seed=0)
    (group,) = sampler.epoch_groups(0)
    assert group[0][0][2] == 0 and group[1][0][2] == 1  # the second process gets a padding sample
    dataset = CaptionedImages(catalog, lambda caps: [], seed=0)
    real, padding = dataset[(0, square[0], 0)], dataset[(0, square[0], 1)]
    assert real["loss_weight"] == 1.0 and padding["loss_weight"] == 0.0


@pytest.mark.slow
def test_two_processes_train_a_dataset_config_with_buckets_and_disk_cache(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    """DDP over gloo: each step both processes train the same bucket, the disk cache is split between them,
    and the steps run are the preflight's steps for 2 processes."""
    import json

    from trainers.preflight.report import preflight

    from helpers import events, run_trainer, sets, two_processes

    for name, size in (("wide", (128, 40)), ("a", (64, 64)), ("b", (72, 64))):
        save_image(tmp_path / "imgs" / f"{name}.png", size)
    save_image(tmp_path / "reg" / "r.png", (64, 64))
    (tmp_path / "dataset.toml").write_text(
        "[[datasets]]\nresolution = 64\nbatch_size = 1\nenable_bucket = true\nmin_bucket_reso = 32\n"
        "max_bucket_reso = 128\nbucket_reso_steps = 32\n"
        '  [[datasets.subsets]]\n  image_dir = "imgs"\n  class_tokens = "sks thing"\n'
        '  [[datasets.subsets]]\n  image_dir = "reg"\n  class_tokens = "thing"\n  is_reg = true\n')
    options = dict(pretrained_model_name_or_path=str(tiny_sd1_dir), dataset_config=str(tmp_path / "dataset.toml"),
                   output_dir=str(tmp_path / "out"), max_train_epochs=1, cache_latents_to_disk=True,
                   network_train_unet_only=True, network_dim=4, max_data_loader_n_workers=0)
    expected = preflight(TrainConfig("lora", options), num_processes=2)
    assert expected.ok and expected.total_steps == 3 + 1  # 64x64: (2 + 3 balanced reg samples) / 2; 96x32: 1
    launcher = two_processes()
    result = run_trainer(sets(**options), tmp_path / "run", launcher, env={"ACCELERATE_USE_CPU": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    evs = events(tmp_path / "run")
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2, 3, 4]
    assert next(e for e in evs if e["type"] == "start")["plan"]["num_processes"] == 2
    assert any(e["type"] == "cache" and e["done"] == e["total"] for e in evs)
    cached = sorted(p.name for p in (tmp_path / "imgs" / ".atelier-cache").iterdir())
    assert cached == ["a.png.64x64.safetensors", "b.png.64x64.safetensors", "wide.png.96x32.safetensors"]
    assert json.loads((tmp_path / "run" / "status.json").read_text())["state"] == "finished"
