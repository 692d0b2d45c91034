"""Wan 2.1 image-to-video (musubi-tuner's task i2v-14B) on a tiny random-init model of its real diffusers classes
(WanImageToVideoPipeline: a 36-channel WanTransformer3DModel with image cross-attention, a CLIPVisionModel and its
CLIPImageProcessor): the folder is claimed, each clip's first frame conditions it as the pipeline does (its mask and
image latent concatenated, its CLIP features beside the text), a step trains the LoRA, a sample renders from its
first frame, and a 2-step run from clips (slow) saves musubi-tuner's names."""
from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from family_checks import model_fixtures

from trainers.core.options import BY_NAME
from trainers.models.checks import model_issues
from trainers.models.rules import folder_rules
from trainers.models.wan.i2v21.rules import WAN21_I2V
from trainers.models.wan.i2v21.tiny import build_tiny_wan21_i2v


tiny, model = model_fixtures(build_tiny_wan21_i2v, "wan21-i2v")


def _values(model_dir: Path, **options: object) -> dict[str, object]:
    return {**{n: o.default for n, o in BY_NAME.items()}, "pretrained_model_name_or_path": str(model_dir), **options}


def _first(pixels: torch.Tensor) -> Any:
    from PIL import Image

    array = ((pixels.clamp(-1, 1) + 1) * 127.5).round().byte().permute(1, 2, 0).numpy()
    return Image.fromarray(array)


def test_the_folder_is_claimed_and_takes_cached_latents(tiny: Path, model: object) -> None:
    assert folder_rules(tiny) is WAN21_I2V and model.unet.config.in_channels == 36
    assert model.family.image_encoder is not None and model.family.image_processor is not None
    assert model_issues(_values(tiny, cache_latents=True, cache_latents_to_disk=True)) == []


def test_the_first_frame_conditions_as_the_pipeline_does(model: object) -> None:
    """encode_image's CLIP features and prepare_latents' mask and image latent, of the clip's first frame."""
    from trainers.models.wan.wan22.i2v import first_frame_condition

    family = model.family.configured({})
    pipe = family.build_pipeline(model, model.noise_scheduler)
    clip = torch.rand(1, 5, 3, 32, 32) * 2 - 1
    clip[:, 0] = torch.tensor(list(_first(clip[0, 0]).getdata()), dtype=torch.float32).view(32, 32, 3).permute(
        2, 0, 1) / 127.5 - 1  # the frame as its 8-bit picture, which the pipeline is given
    with torch.no_grad():
        theirs = pipe.encode_image(_first(clip[0, 0]), torch.device("cpu"))
        _, condition = pipe.prepare_latents(clip[:, 0], 1, 16, 32, 32, 5, torch.float32, torch.device("cpu"))
    assert torch.allclose(family.clip_features(clip[:, 0], torch.device("cpu")), theirs, atol=1e-5)
    assert torch.allclose(first_frame_condition(model.vae, clip, torch.float32), condition, atol=1e-5)


@dataclasses.dataclass
class _Trainable:
    objective: Any


def test_a_step_trains_on_the_condition_and_the_clip_features(model: object) -> None:
    from trainers.methods.lora.network import LoRANetwork
    from trainers.train.diffusion import NoiseOptions
    from trainers.train.flow import flow_loss

    family = model.family.configured({**{n: o.default for n, o in BY_NAME.items()}, "timestep_sampling": "shift",
                                      "discrete_flow_shift": 3.0})
    run = dataclasses.replace(model, family=family, unet=copy.deepcopy(model.unet))
    calls: list[dict[str, Any]] = []
    run.unet.register_forward_pre_hook(lambda m, a, kw: calls.append(kw), with_kwargs=True)
    network = LoRANetwork(run.unet, [], unet_key_style="own", network_dim=4, network_alpha=2,
                          train_text_encoder=False, unet_targets=family.lora_targets(run.unet))
    network.apply_to()
    hidden, _ = model.encode_texts(["a red fox"], 1)

    def predictor(noisy: torch.Tensor, timesteps: torch.Tensor, *rest: object) -> torch.Tensor:
        return family.denoise(run.unet, noisy, timesteps, hidden.expand(noisy.shape[0], -1, -1), None, None)

    objective = family.adapt_trainable(None, None, _Trainable(flow_loss)).objective
    opts = NoiseOptions(seed=3, noise_offset=0.0, min_snr_gamma=None, prediction_type="flow")
    loss = objective(predictor, run, {"pixels": torch.rand(2, 5, 3, 32, 32) * 2 - 1,
                                      "keys": torch.tensor([[0, 0], [0, 1]])}, opts, torch.float32)
    loss.backward()
    assert torch.isfinite(loss) and family.slot.condition is None and family.slot.image_embeds is None
    (call,) = calls
    assert call["hidden_states"].shape[1] == 36 and call["encoder_hidden_states_image"].shape == (2, 17, 16)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in network.parameters())
    with pytest.raises(ValueError, match="made without it"):  # a cache of latents alone (no first frame)
        objective(predictor, run, {"latent_mean": torch.zeros(1), "keys": torch.tensor([[0, 0]])}, opts,
                  torch.float32)


def test_a_sample_renders_from_its_first_frame(model: object, tmp_path: Path) -> None:
    from family_checks import check_sample_renders_from_a_first_frame

    check_sample_renders_from_a_first_frame(model, tmp_path)


@pytest.mark.slow
def test_a_two_step_lora_from_clips_names_musubis_modules(tiny: Path, tmp_path: Path) -> None:
    from helpers import events, train
    from family_checks import clips_dataset as _video_dataset

    from trainers.methods.lora.file_format import read_lora_file

    dataset = _video_dataset(tmp_path / "data")
    first = tmp_path / "data" / "images" / "red.png"
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=str(tiny), dataset_config=str(dataset),
                 output_dir=str(tmp_path / "out"), output_name="i2v", max_data_loader_n_workers=0,
                 learning_rate=1e-2, network_dim=4, network_alpha=2, save_precision="float",
                 timestep_sampling="shift", discrete_flow_shift=3.0, max_train_steps=2,
                 sample_prompt_lines=[f"a clip --w 32 --h 32 --s 2 --ci {first}"], sample_every_n_steps=2) == 0
    evs = events(tmp_path / "run")
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2]
    assert Path(next(e for e in evs if e["type"] == "sample")["path"]).suffix == ".mp4"
    lora, metadata = read_lora_file(tmp_path / "out" / "i2v.safetensors")
    assert "lora_unet_blocks_0_cross_attn_k.lora_down.weight" in lora
    assert metadata["ss_base_model_version"] == "wan21_i2v"


def test_its_lora_covers_the_image_projections_and_wan_pipeline_loads_every_key(model: object,
                                                                               tmp_path: Path) -> None:
    from diffusers import WanImageToVideoPipeline
    from lora_networks import random_network
    from safetensors.torch import save_file

    unet = copy.deepcopy(model.unet).eval()
    network, targets, state = random_network(model.family, unet)
    names = {t.name for t in targets}
    assert {"lora_unet_blocks_0_cross_attn_k_img", "lora_unet_blocks_1_cross_attn_v_img"} <= names
    save_file(state, tmp_path / "lora.safetensors")
    pipe = WanImageToVideoPipeline(tokenizer=model.tokenizers[0], text_encoder=model.text_encoders[0],
                                   vae=model.vae, scheduler=model.noise_scheduler,
                                   image_processor=model.family.image_processor,
                                   image_encoder=model.family.image_encoder, transformer=copy.deepcopy(unet))
    pipe.load_lora_weights(tmp_path / "lora.safetensors", adapter_name="default_0")
    layers = [n for n, m in pipe.transformer.named_modules() if hasattr(m, "lora_A") and "default_0" in m.lora_A]
    assert len(layers) == len(targets) == 2 * 12  # 8 attention, 2 image projections, 2 feed-forward a block
    inputs = {"hidden_states": torch.randn(1, 36, 2, 4, 4), "timestep": torch.tensor([500.0]),
              "encoder_hidden_states": torch.randn(1, 7, 32), "encoder_hidden_states_image": torch.randn(1, 17, 16),
              "return_dict": False}
    network.apply_to()  # the network as training runs it computes what diffusers does
    with torch.no_grad():
        assert torch.allclose(pipe.transformer(**inputs)[0], unet(**inputs)[0], atol=1e-4)


PRESETS = sorted((Path(__file__).resolve().parents[2] / "presets").glob("wan21_i2v_14b_lora_*gb.toml"))


@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_each_preset_fits_its_tier_and_validates_on_clips(path: Path, tiny: Path, tmp_path: Path) -> None:
    """By the estimate for the published I2V 14B (as its comment says), and Validate's preflight on the tiny model;
    each caches the latents, so the VAE and the CLIP encoder do not run in its steps."""
    from family_checks import check_preset, clips_dataset

    assert 'cache_latents = true' in path.read_text(encoding="utf-8")
    check_preset(path, "Wan-AI/Wan2.1-I2V-14B-480P-Diffusers", tiny, clips_dataset(tmp_path / "data"), tmp_path / "out")


def test_cached_latents_keep_each_windows_first_frame_and_clip_features(model: object, tmp_path: Path) -> None:
    """With cache_latents the first frame's latent and CLIP features are cached with each window, and a step gives
    the loss of those encoded from its pixels without running the VAE or the CLIP image encoder."""
    from wan_i2v_checks import check_cached_condition_trains_as_encoded

    check_cached_condition_trains_as_encoded(model, tmp_path, {"first_frame", "clip_features"})


@pytest.mark.slow
def test_a_cached_run_equals_the_uncached_one_and_resumes_exactly(tiny: Path, tmp_path: Path) -> None:
    from wan_i2v_checks import check_cached_runs_equal_uncached

    check_cached_runs_equal_uncached(tiny, tmp_path)
