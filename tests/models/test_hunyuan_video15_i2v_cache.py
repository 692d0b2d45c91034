"""HunyuanVideo 1.5 image to video with cached latents: each window's first-frame latent and SigLIP's states of it are
cached beside its latents (on disk in the same file, under a key that names the image encoder), the step makes the
transformer's condition from them with neither the VAE nor SigLIP running, as it makes it from the pixels; a 2-step
LoRA with cached latents equals the uncached one (fp32, the same seed) and resumes exactly."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from wan_i2v_checks import check_cached_runs_equal_uncached

from trainers.models import load_model
from trainers.models.hunyuan_video15.i2v import EXTRAS_KEY, FIRST_FRAME, IMAGE_STATES, batch_condition
from trainers.models.hunyuan_video15.tiny import LATENT_CHANNELS, build_tiny_hunyuan_video15


@pytest.fixture(scope="module")
def tiny_i2v(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_hunyuan_video15(tmp_path_factory.mktemp("hv15-i2v-cache") / "model", i2v=True)


def _refused(*args: object, **kwargs: object) -> None:
    raise AssertionError("ran in a step with cached latents")


def test_the_cached_first_frame_conditions_as_the_encoded_one_without_the_vae_or_siglip(tiny_i2v: Path) -> None:
    from trainers.data.video_dataset import EXTRA

    model = load_model(str(tiny_i2v), "auto", torch.float32)
    family = model.family
    t2v = load_model(str(build_tiny_hunyuan_video15(tiny_i2v.parent / "t2v")), "auto", torch.float32)
    assert t2v.family.window_extras(t2v) is None  # text to video caches its latents alone
    extras = family.window_extras(model)
    assert extras.key.startswith(EXTRAS_KEY) and family.image_encoder.processor.to_json_string() in extras.key
    pixels = torch.rand(2, 5, 3, 32, 48, generator=torch.Generator().manual_seed(0)) * 2 - 1  # 5 frames: 2 latent
    cached = extras.encode(pixels)
    assert cached[FIRST_FRAME].shape == (2, LATENT_CHANNELS, 1, 2, 3) and cached[IMAGE_STATES].shape == (2, 4, 16)
    encoded = batch_condition(model.vae, family.image_encoder, {"pixels": pixels}, torch.float32)
    batch = {"latent_mean": torch.zeros(2, LATENT_CHANNELS, 2, 2, 3),
             **{EXTRA + name: tensor for name, tensor in cached.items()}}
    model.vae.encode, family.image_encoder.model.forward = _refused, _refused
    condition = batch_condition(model.vae, family.image_encoder, batch, torch.float32)
    assert condition.latents.shape == (2, LATENT_CHANNELS + 1, 2, 2, 3)
    assert torch.equal(condition.latents, encoded.latents) and torch.equal(condition.image_embeds, encoded.image_embeds)
    with pytest.raises(ValueError, match="cached latents were made without it"):
        batch_condition(model.vae, family.image_encoder, {"latent_mean": batch["latent_mean"]}, torch.float32)


@pytest.mark.slow  # three 2-step LoRA runs
def test_a_cached_run_equals_the_uncached_one_and_resumes_exactly(tiny_i2v: Path, tmp_path: Path) -> None:
    from safetensors import safe_open

    from trainers.data.cache import CACHE_DIR

    check_cached_runs_equal_uncached(tiny_i2v, tmp_path)
    entries = sorted((tmp_path / "data" / "clips" / CACHE_DIR).glob("*.safetensors"))
    with safe_open(str(entries[0]), "pt") as entry:
        assert {f"extra.{FIRST_FRAME}", f"extra.{IMAGE_STATES}", "mean", "std"} <= set(entry.keys())


I2V_PRESETS = sorted((Path(__file__).resolve().parents[2] / "presets").glob("hunyuan_video15_i2v_lora_*gb.toml"))


def test_there_is_an_image_to_video_preset_for_each_small_tier() -> None:
    assert [p.stem.rsplit("_", 1)[1] for p in I2V_PRESETS] == ["12gb", "16gb", "24gb"]


@pytest.mark.parametrize("path", I2V_PRESETS, ids=[p.stem for p in I2V_PRESETS])
def test_each_image_to_video_preset_caches_fits_its_tier_and_validates_on_clips(path: Path, tiny_i2v: Path,
                                                                               tmp_path: Path) -> None:
    """Its latents cached (the first frame's condition with them: no VAE or SigLIP in the steps, SigLIP back on the
    host after the cache pass), by the estimate for the published 480p I2V model, and Validate's preflight on the
    tiny I2V model with clips."""
    import tomllib

    from family_checks import check_preset, clips_dataset

    assert tomllib.loads(path.read_text(encoding="utf-8"))["dataset"]["cache_latents"] is True
    estimate, comment = check_preset(path, "hunyuanvideo-community/HunyuanVideo-1.5-480p_i2v", tiny_i2v,
                                     clips_dataset(tmp_path / "data", fps=24), tmp_path / "out")
    assert estimate.source.startswith("the published HunyuanVideo 1.5")
    assert f"~{estimate.caching_card_gb:.1f} GB while the captions are encoded" in comment
    assert "HunyuanVideo-1.5-480p_i2v" in comment and "image_encoder" in comment and "--ci" in comment
