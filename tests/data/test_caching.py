"""Latent and text-encoder caches: same latents as without a cache, rebuilt exactly when settings change."""
from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from trainers.core.options import TrainConfig
from trainers.data import cache as cache_module
from trainers.data.cache import CacheWriteError, Dist, build_latent_cache, build_text_cache, cache_file
from trainers.data.catalog import build_catalog
from trainers.data.dataset import CaptionedImages, collate, flip_of
from trainers.train.diffusion import NoisePredictor, sample_latents
from trainers.train.latents import latent_distribution

from image_files import save_image


@pytest.fixture(scope="module")
def vae(tiny_sd1_dir: Path) -> torch.nn.Module:
    from diffusers import AutoencoderKL

    return AutoencoderKL.from_pretrained(tiny_sd1_dir / "vae").eval()


@pytest.fixture
def data(tmp_path: Path) -> Path:
    folder = tmp_path / "data" / "1_sks thing"
    for i, size in enumerate([(96, 48), (48, 96), (64, 64), (80, 64), (100, 40)]):
        save_image(folder / f"img {i}.png", size, seed=i)
    return tmp_path / "data"


def catalog_for(data: Path, **extra: object):
    """Small sizes keep the tiny VAE quick; `buckets()` adds aspect-ratio buckets."""
    values = {"train_data_dir": str(data), "resolution": "64", "flip_aug": True, **extra}
    return build_catalog(TrainConfig("lora", values).values)


def buckets() -> dict[str, object]:
    return {"resolution": "64", "enable_bucket": True, "min_bucket_reso": 32, "max_bucket_reso": 128,
            "bucket_reso_steps": 32}


def count_writes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    written: list[Path] = []
    original = cache_module._write

    def spy(path: Path, entries, key: str) -> None:
        written.append(path)
        original(path, entries, key)

    monkeypatch.setattr(cache_module, "_write", spy)
    return written


def test_cached_latents_equal_encoding_every_step(data: Path, vae: torch.nn.Module) -> None:
    catalog = catalog_for(data, **buckets())
    assert len({image.bucket for image in catalog.images}) > 2
    latents, failed = build_latent_cache(catalog, vae, to_disk=False, batch_size=2)
    assert not failed
    cached = CaptionedImages(catalog, lambda caps: [], seed=3, latents=latents)
    fresh = CaptionedImages(catalog, lambda caps: [], seed=3)
    flips = set()
    for epoch in range(1):
        for index in range(len(catalog.samples)):
            flips.add(flip_of(True, 3, epoch, index)[0])
            a, b = collate([cached[(epoch, index, 0)]]), collate([fresh[(epoch, index, 0)]])
            for name in ("original_size", "crop_top_left", "target_size"):
                assert torch.equal(a[name], b[name]), name
            with torch.no_grad():
                from_cache = sample_latents(a["latent_mean"], a["latent_std"], a["keys"], 3, vae.config.scaling_factor)
                fresh_dist = latent_distribution(SimpleNamespace(vae=vae, latent_memo=None), b)  # as training encodes
                encoded = sample_latents(*fresh_dist, b["keys"], 3, vae.config.scaling_factor)
            assert torch.allclose(from_cache, encoded, atol=1e-5)
    assert flips == {False, True}  # flipped and unflipped samples both came from the cache


def test_disk_cache_is_reused_and_rebuilt_exactly_when_something_changes(data: Path, vae: torch.nn.Module,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    written = count_writes(monkeypatch)
    progress: list[tuple[int, int]] = []
    catalog = catalog_for(data)
    latents, _ = build_latent_cache(catalog, vae, to_disk=True, batch_size=5,
                                    progress=lambda d, t: progress.append((d, t)))
    files = {cache_file(image) for image in catalog.images}
    assert len(written) == 5 and set(written) == files and all(f.exists() for f in files)
    assert all(f.parent.name == ".atelier-cache" for f in files)
    assert progress[-1] == (1, 1)  # one batch of five images (a bucket), done
    entry = latents.get(catalog.images[0], flip=True)
    assert entry.mean.shape[0] == 4 and tuple(entry.target_size.tolist()) == catalog.images[0].bucket[::-1]

    written.clear()
    build_latent_cache(catalog_for(data), vae, to_disk=True)
    assert written == []  # same VAE, images and settings: every file reused

    build_latent_cache(catalog_for(data, resolution="72"), vae, to_disk=True)
    assert len(written) == 5  # a new resolution: every image trains at another size
    written.clear()
    build_latent_cache(catalog_for(data, flip_aug=False), vae, to_disk=True)
    assert len(written) == 5  # the entries no longer hold flipped latents
    written.clear()
    save_image(data / "1_sks thing" / "img 2.png", (64, 64), seed=99)  # the user edits one image
    build_latent_cache(catalog_for(data, flip_aug=False), vae, to_disk=True)
    assert [p.name for p in written] == ["img 2.png.64x64.safetensors"]
    written.clear()
    with torch.no_grad():
        next(vae.parameters()).add_(0.01)  # another VAE
    try:
        build_latent_cache(catalog_for(data, flip_aug=False), vae, to_disk=True)
    finally:
        with torch.no_grad():
            next(vae.parameters()).sub_(0.01)
    assert len(written) == 5


def test_disk_caching_is_split_across_processes(data: Path, vae: torch.nn.Module,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    written = count_writes(monkeypatch)
    catalog = catalog_for(data)
    barrier = threading.Barrier(2)
    gathered: list[object] = [None, None]
    by_rank: dict[int, list[Path]] = {}

    def process(rank: int) -> None:
        def gather(obj: object) -> list[object]:
            gathered[rank] = obj
            barrier.wait()
            return list(gathered)

        before = len(written)
        build_latent_cache(catalog, vae, to_disk=True, dist=Dist(rank, 2, barrier.wait, gather))
        by_rank[rank] = written[before:]

    threads = [threading.Thread(target=process, args=(rank,)) for rank in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(written) == sorted(cache_file(image) for image in catalog.images)  # each image encoded once
    assert len(written) == 5 and len(set(written)) == 5


def test_an_image_that_cannot_be_decoded_is_left_out_and_reported(data: Path, vae: torch.nn.Module) -> None:
    catalog = catalog_for(data)
    broken = catalog.images[1].path
    broken.write_bytes(broken.read_bytes()[:200] + b"\x00" * 400)  # header intact, pixels gone
    latents, failed = build_latent_cache(catalog, vae, to_disk=False)
    assert list(failed) == [1] and "cannot be decoded" in failed[1]
    smaller = catalog.without(failed)
    assert len(smaller.images) == 4 and smaller.skipped[-1].path == broken
    CaptionedImages(smaller, lambda caps: [], seed=0, latents=latents)[(0, 0, 0)]  # the rest still trains


def test_an_unwritable_cache_folder_is_a_clear_error(data: Path, vae: torch.nn.Module,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cache_module, "atomic_path", refuse)
    with pytest.raises(CacheWriteError, match="cannot write the latent cache file .*img .*Permission denied"):
        build_latent_cache(catalog_for(data), vae, to_disk=True)


def test_text_encoder_outputs_cached_for_sdxl(tiny_sdxl_dir: Path, data: Path) -> None:
    from trainers.models import load_model
    from trainers.train.diffusion import NoiseOptions, diffusion_loss

    model = load_model(str(tiny_sdxl_dir), "auto", torch.float32)
    catalog = catalog_for(data, flip_aug=False, **buckets())
    dataset = CaptionedImages(catalog, lambda caps: model.family.tokenize(model.tokenizers, caps), seed=0)

    def encode(captions: list[str]):
        return model.family.encode_prompts(model.text_encoders, model.family.tokenize(model.tokenizers, captions), 1)

    captions = [dataset.caption(0, i) for i in range(len(dataset))]
    dataset.texts = build_text_cache(captions, encode, batch_size=2)
    assert len(dataset.texts.embeds) == 1  # five images, one caption ("sks thing")
    item = dataset[(0, 0, 0)]
    assert "input_ids" not in item  # nothing left for the text encoders to do
    hidden, pooled = encode([captions[0]])
    assert torch.allclose(item["prompt_embeds"], hidden[0]) and torch.allclose(item["pooled_embeds"], pooled[0])
    predictor = NoisePredictor(model, None, 1, train_text_encoder=False, text_encoders_cached=True)
    assert len(predictor.text_encoders) == 0  # the encoders stay out of the trained module
    fresh = NoisePredictor(model, None, 1, train_text_encoder=False)
    same_bucket = [i for i in range(len(dataset)) if catalog.bucket_of(i) == catalog.bucket_of(0)]
    cached_batch = collate([dataset[(0, i, 0)] for i in same_bucket])
    dataset.texts = None
    fresh_batch = collate([dataset[(0, i, 0)] for i in same_bucket])
    opts = NoiseOptions(0, 0.0, None, model.prediction_type)
    with torch.no_grad():
        assert torch.allclose(diffusion_loss(predictor, model, cached_batch, opts, torch.float32),
                              diffusion_loss(fresh, model, fresh_batch, opts, torch.float32), atol=1e-6)


def test_text_encoder_outputs_on_disk_are_reused_by_the_next_run(tiny_sd1_dir: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """cache_text_encoder_outputs_to_disk: the second run encodes nothing and trains the same LoRA; a setting that
    changes the outputs (clip_skip) encodes again."""
    from helpers import train

    from trainers.data import pipeline
    from trainers.demo import build_dataset
    from trainers.methods.lora.file_format import read_lora_file

    encoded: list[int] = []
    real = cache_module.build_text_cache

    def counting(captions, encode, *args, **kwargs):  # type: ignore[no-untyped-def]
        return real(captions, lambda caps: (encoded.append(len(caps)), encode(caps))[1], *args, **kwargs)

    monkeypatch.setattr(pipeline, "build_text_cache", counting)
    data = build_dataset(tmp_path / "data")
    common = {"pretrained_model_name_or_path": str(tiny_sd1_dir), "train_data_dir": str(data), "resolution": "64",
              "max_train_steps": 2, "max_data_loader_n_workers": 0, "network_train_unet_only": True,
              "cache_text_encoder_outputs": True, "cache_text_encoder_outputs_to_disk": True}
    for run in ("first", "second", "clip skip 2"):
        extra = {"clip_skip": 2} if run == "clip skip 2" else {}
        encoded.clear()
        assert train("lora", tmp_path / run, **common, **extra, output_dir=str(tmp_path / run / "out")) == 0
        assert (sum(encoded) > 0) == (run != "second"), (run, encoded)
    assert list((data / "5_sks shape" / ".atelier-cache" / "text").glob("*.safetensors"))
    first, _ = read_lora_file(tmp_path / "first" / "out" / "lora.safetensors")
    second, _ = read_lora_file(tmp_path / "second" / "out" / "lora.safetensors")
    assert all(torch.equal(first[k], second[k]) for k in first)
