"""Wan 2.1 text-to-video, the first video family, in process on a tiny random-init model of its real diffusers classes
(WanTransformer3DModel, the causal AutoencoderKLWan, UMT5EncoderModel): the folder is claimed, other Wan pipelines and
other families' models are refused by name before anything loads, captions are encoded and the transformer called as
WanPipeline does on (B, C, F, h, w) latents (images as 1-frame clips), one flow-matching step trains every block, and
its LoRA file (musubi-tuner's names) loads with every key in ComfyUI (comfy_lora.py) and in WanPipeline."""
from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from comfy_lora import PREFIX, check_patches, load_lora, unet_key_map
from family_checks import (check_adapter_updates, check_clip_run_sampled, check_preset, clip_and_image_flow_steps,
                           check_wrong_family_refused, model_fixtures, check_resumed_equals_straight, clip_lora_runs,
                           clips_dataset, index_folder, option_values, saved_fixture, write_captioned_clip)

from trainers.models.checks import model_issues
from trainers.models.rules import folder_rules
from trainers.models.wan.rules import WAN21
from trainers.models.wan.tiny import build_tiny_wan

CAPTIONS = ["a red fox runs through snow", "waves at dusk"]


tiny, model = model_fixtures(build_tiny_wan, "wan")


_values, _folder = option_values, index_folder


def test_the_tiny_folder_is_claimed_and_other_wan_pipelines_refused_by_name(tiny: Path, tmp_path: Path) -> None:
    assert folder_rules(tiny) is WAN21
    index = json.loads((tiny / "model_index.json").read_text())
    assert index["transformer"][1] == "WanTransformer3DModel" and index["vae"][1] == "AutoencoderKLWan"
    assert index["text_encoder"][1] == "UMT5EncoderModel"
    i2v = _folder(tmp_path, "i2v", {"_class_name": "WanImageToVideoPipeline"})
    (issue,) = model_issues(_values(i2v))
    assert issue.field == "pretrained_model_name_or_path" and "WanImageToVideoPipeline" in issue.message
    pair = _folder(tmp_path, "a14b", {**index, "transformer_2": ["diffusers", "WanTransformer3DModel"],
                                      "boundary_ratio": 0.875})
    assert folder_rules(pair).name == "wan22"  # the A14B pair is Wan 2.2's (tests/models/test_wan22.py)
    (issue,) = model_issues(_values(pair, model_family="wan21"))
    assert issue.field == "model_family" and "Wan 2.2" in issue.message


def test_a_wrong_family_model_is_refused_by_name_before_loading(tiny: Path, tmp_path: Path) -> None:
    check_wrong_family_refused(_values, tiny, tmp_path, "wan21", "Wan 2.1", "zimage")


def test_validate_names_the_family_in_what_it_refuses(tiny: Path) -> None:
    issues = model_issues(_values(tiny, min_snr_gamma=5.0, save_model_as="safetensors", text_encoder_lr=[1e-4]))
    assert sorted(i.field for i in issues) == ["min_snr_gamma", "save_model_as", "text_encoder_lr"]
    assert all("Wan 2.1" in i.message for i in issues)


def test_captions_are_encoded_as_its_pipeline_does(model: object) -> None:
    from diffusers import WanPipeline

    pipe = WanPipeline(tokenizer=model.tokenizers[0], text_encoder=model.text_encoders[0], vae=model.vae,
                       scheduler=model.noise_scheduler, transformer=model.unet)
    theirs = pipe.encode_prompt(CAPTIONS, do_classifier_free_guidance=False, max_sequence_length=512,
                                device=torch.device("cpu"))[0]
    ours, mask = model.encode_texts(CAPTIONS, 1)
    assert ours.shape == theirs.shape == (2, 512, 32)
    assert torch.allclose(ours, theirs, atol=1e-5)
    assert mask.sum(dim=1).tolist() == [float(n) for n in (ours.abs().sum(-1) > 0).sum(dim=1).tolist()]


def test_clips_and_images_encode_to_latents_with_a_frame_axis(model: object) -> None:
    """Causal temporal compression 4 (1 + 4k frames to 1 + k), spatial 8, 16 channels; an image is one frame."""
    with torch.no_grad():
        clip = model.vae.encode(torch.rand(1, 3, 9, 32, 48) * 2 - 1).latent_dist.mean
        image = model.vae.encode(torch.rand(2, 3, 32, 48) * 2 - 1).latent_dist.mean
    assert clip.shape == (1, 16, 3, 4, 6) and image.shape == (2, 16, 1, 4, 6)
    vae = model.vae.config
    normed = model.family.vae_latents(clip, model.vae)
    expected = (clip - torch.tensor(vae.latents_mean).view(1, 16, 1, 1, 1)) / torch.tensor(
        vae.latents_std).view(1, 16, 1, 1, 1)
    assert torch.allclose(normed, expected)


def test_denoise_calls_the_transformer_as_its_pipeline_does(model: object) -> None:
    noisy, timesteps = torch.randn(2, 16, 2, 4, 6), torch.tensor([900.0, 100.0])
    hidden, mask = model.encode_texts(CAPTIONS, 1)
    with torch.no_grad():
        ours = model.family.denoise(model.unet, noisy, timesteps, hidden, mask, None)
        theirs = model.unet(hidden_states=noisy, timestep=timesteps, encoder_hidden_states=hidden,
                            return_dict=False)[0]
    assert ours.shape == noisy.shape and torch.equal(ours, theirs)


def test_one_flow_matching_step_on_a_clip_and_an_image_trains_every_block(model: object) -> None:
    for run in clip_and_image_flow_steps(model, CAPTIONS[0], 3.0, masked=False):
        for i, block in enumerate(run.unet.blocks):
            assert block.attn1.to_q.weight.grad.abs().sum() > 0, i
            assert block.ffn.net[2].weight.grad.abs().sum() > 0, i


def _comfy_shapes(unet: torch.nn.Module) -> dict[str, torch.Size]:
    """The blocks' linear weights of ComfyUI's Wan model (comfy/ldm/wan/model.py, Wan-AI's names: self_attn.q,
    cross_attn.o, ffn.0, ffn.2)."""
    config = unet.config
    width, ffn = config.num_attention_heads * config.attention_head_dim, config.ffn_dim
    shapes = {}
    for i in range(config.num_layers):
        for attention in ("self_attn", "cross_attn"):
            for proj in "qkvo":
                shapes[f"{PREFIX}blocks.{i}.{attention}.{proj}.weight"] = torch.Size((width, width))
        shapes[f"{PREFIX}blocks.{i}.ffn.0.weight"] = torch.Size((ffn, width))
        shapes[f"{PREFIX}blocks.{i}.ffn.2.weight"] = torch.Size((width, ffn))
    return shapes


saved = saved_fixture()


def test_its_lora_file_has_musubis_names_and_comfyui_loads_every_key(saved: SimpleNamespace) -> None:
    assert {t.name for t in saved.targets} >= {"lora_unet_blocks_0_self_attn_q", "lora_unet_blocks_0_cross_attn_o",
                                               "lora_unet_blocks_1_ffn_0", "lora_unet_blocks_1_ffn_2"}
    shapes = _comfy_shapes(saved.unet)
    key_map = unet_key_map(shapes)
    patches, not_loaded = load_lora(saved.file, key_map)
    assert not_loaded == []  # ComfyUI warns "lora key not loaded" for each of these
    assert len(patches) == len(saved.targets) == len(shapes)  # every block linear has its LoRA
    check_patches(patches, shapes)
    paths = {id(m): p for p, m in saved.unet.named_modules()}
    for target in saved.targets:
        assert torch.allclose(patches[key_map[target.name]], saved.updates[paths[id(target.layers[0])]], atol=1e-5)


def test_wan_pipeline_loads_every_key_into_the_layer_that_was_trained(model: object, saved: SimpleNamespace,
                                                                       tmp_path: Path) -> None:
    from diffusers import WanPipeline
    from safetensors.torch import save_file

    save_file(saved.file, tmp_path / "lora.safetensors")
    pipe = WanPipeline(tokenizer=model.tokenizers[0], text_encoder=model.text_encoders[0], vae=model.vae,
                       scheduler=model.noise_scheduler, transformer=copy.deepcopy(model.unet).eval())
    pipe.load_lora_weights(tmp_path / "lora.safetensors", adapter_name="default_0")
    check_adapter_updates(pipe.transformer, saved.updates)
    inputs = {"hidden_states": torch.randn(1, 16, 2, 4, 4), "timestep": torch.tensor([500.0]),
              "encoder_hidden_states": torch.randn(1, 7, 32), "return_dict": False}
    saved.network.apply_to()  # the network as training runs it computes what diffusers does
    with torch.no_grad():
        assert torch.allclose(pipe.transformer(**inputs)[0], saved.unet(**inputs)[0], atol=1e-4)


def test_a_sample_is_a_short_mp4_rendered_through_wan_pipeline(model: object, tmp_path: Path) -> None:
    import av

    from trainers.core.prompts import config_prompts
    from trainers.sampling.pipeline import generate_samples

    prompts = config_prompts("", ["a red fox --n blurry --w 48 --h 32 --s 2 --d 3"])
    (written,) = generate_samples(model, prompts, tmp_path, "step2", default_size=(48, 32), default_steps=2,
                                  default_cfg=3.0)
    assert written.suffix == ".mp4" and written.parent == tmp_path
    with av.open(str(written)) as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
        assert "a red fox" in container.metadata.get("comment", "")
    assert len(frames) == model.family.sample_frames and (frames[0].width, frames[0].height) == (48, 32)
    assert float(stream.average_rate) == model.family.frame_rate


def _write_clip(path: Path, frames: int, size: tuple[int, int] = (32, 32)) -> Path:
    """An mpeg4 clip at 16 fps whose frames brighten, with a caption beside it."""
    return write_captioned_clip(path, frames, f"a clip of {frames} frames", size=size)


@pytest.mark.parametrize("cached", [False, True])
def test_a_two_step_lora_trains_from_three_clips_and_an_image(model: object, tmp_path: Path, cached: bool) -> None:
    """The video data path (build_video_pipeline: V's catalog and clip windows) into the flow objective: batches of
    clips (B, F, C, H, W) and a 1-frame image, 5D latents, the LoRA's file in musubi-tuner's names."""
    from PIL import Image

    from trainers.core.options import load_config
    from trainers.data.pipeline import build_video_pipeline
    from trainers.data.video_catalog import build_video_catalog
    from trainers.data.video_toml import video_dataset_specs
    from trainers.methods.lora.network import LoRANetwork
    from trainers.train.diffusion import NoiseOptions
    from trainers.train.flow import flow_loss

    clips, images = tmp_path / "clips", tmp_path / "images"
    clips.mkdir()
    images.mkdir()
    for name, frames in (("a.mp4", 9), ("b.mp4", 5), ("c.mp4", 12)):
        _write_clip(clips / name, frames)
    Image.new("RGB", (32, 32), (200, 40, 40)).save(images / "red.png")
    (images / "red.txt").write_text("a red square")
    raw = {"general": {"resolution": [32, 32], "batch_size": 1},
           "datasets": [{"video_directory": str(clips), "target_frames": [1, 5]}, {"image_directory": str(images)}]}
    specs = video_dataset_specs(raw, tmp_path, [])
    catalog = build_video_catalog(specs, model.family.frame_rule, model.family.frame_rate)
    assert {len(c.frames) for c in catalog.clips} == {1, 5} and any(c.is_image for c in catalog.clips)
    (tmp_path / "cfg.toml").write_text("")
    cfg = load_config("lora", tmp_path / "cfg.toml", [f"cache_latents={json.dumps(cached)}",
                                                      "max_data_loader_n_workers=0"])
    accelerator = SimpleNamespace(is_main_process=True, num_processes=1, device=torch.device("cpu"))
    warned: list[str] = []
    events = SimpleNamespace(warn=warned.append, emit=lambda event: None)
    family = model.family.configured({**cfg.values, "timestep_sampling": "shift", "discrete_flow_shift": 3.0})
    run = dataclasses.replace(model, family=family, unet=copy.deepcopy(model.unet))
    data = build_video_pipeline(cfg, catalog, run, accelerator, events)
    assert warned == []
    targets = family.lora_targets(run.unet)
    network = LoRANetwork(run.unet, [], unet_key_style="own", network_dim=4, network_alpha=2,
                          train_text_encoder=False, unet_targets=targets)
    network.apply_to()
    optimizer = torch.optim.AdamW(network.parameters(), lr=1e-2)
    text_encoders = model.text_encoders

    def predictor(noisy: torch.Tensor, timesteps: torch.Tensor, ids: list[torch.Tensor], sizes: object,
                  embeds: object) -> torch.Tensor:
        hidden, mask = family.encode_prompts(text_encoders, ids, 1)
        return family.denoise(run.unet, noisy, timesteps, hidden, mask, sizes)

    opts = NoiseOptions(seed=1, noise_offset=0.0, min_snr_gamma=None, prediction_type="flow")
    frames_seen = set()
    before = {k: v.clone() for k, v in network.kohya_state_dict(torch.float32).items()}
    for step, batch in zip(range(2), data.loader):
        key = "latent_mean" if cached else "pixels"
        frames_seen.add(batch[key].shape[2] if cached else batch[key].shape[1])
        loss = flow_loss(predictor, data.model, batch, opts, torch.float32)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        assert torch.isfinite(loss), step
    after = network.kohya_state_dict(torch.float32)
    assert any(not torch.equal(before[k], after[k]) for k in after if k.endswith("lora_up.weight"))
    assert "lora_unet_blocks_1_cross_attn_v.lora_up.weight" in family.lora_file(after, run)
    assert frames_seen  # windows of 1 or 5 frames (2 latent frames), or an image (1)


def _video_dataset(tmp: Path) -> Path:
    """3 tiny clips (9, 5 and 12 frames) and an image, as a musubi-tuner video dataset config."""
    return clips_dataset(tmp)


def test_an_image_family_refuses_a_video_dataset_config_by_name(tmp_path: Path) -> None:
    from trainers.core.options import ConfigError
    from trainers.models.video_data import is_video_run, video_run_catalog

    values = {"dataset_config": str(_video_dataset(tmp_path)), "model_family": "zimage"}
    assert is_video_run(values)
    with pytest.raises(ConfigError) as err:
        video_run_catalog(values, [])
    (issue,) = err.value.issues
    assert issue.field == "dataset_config" and "Z-Image trains on images" in issue.message
    clips = video_run_catalog({**values, "model_family": "wan21"}, [])
    assert clips.num_train_samples == 7 and {len(c.frames) for c in clips.video.clips} == {1, 5}


@pytest.fixture(scope="module")
def clip_runs(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """A 2-step LoRA from 3 clips and an image (a sample at its end, a state at step 1), the same resumed."""
    tmp = tmp_path_factory.mktemp("wan-clips")
    return clip_lora_runs(tiny, tmp, _video_dataset(tmp / "data"), discrete_flow_shift=3.0)


@pytest.mark.slow
def test_a_lora_run_from_clips_trains_samples_an_mp4_and_names_musubis_modules(clip_runs: SimpleNamespace) -> None:
    check_clip_run_sampled(clip_runs)
    keys = {"lora_unet_blocks_0_self_attn_q.lora_down.weight", "lora_unet_blocks_1_ffn_2.alpha"}
    assert keys <= clip_runs.lora.keys()
    assert clip_runs.metadata["ss_network_module"] == "networks.lora_wan"
    assert clip_runs.metadata["ss_num_train_images"] == "7"  # 6 clip windows and the image


@pytest.mark.slow
def test_a_resumed_clip_lora_equals_the_uninterrupted_one(clip_runs: SimpleNamespace) -> None:
    check_resumed_equals_straight(clip_runs)


PRESETS = sorted((Path(__file__).resolve().parents[2] / "presets").glob("wan21_t2v_*_lora_*gb.toml"))


@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_each_preset_fits_its_tier_and_validates_on_clips(path: Path, tiny: Path, tmp_path: Path) -> None:
    """By the estimate for the published 1.3B or 14B (as its comment says, the caption pass too), and Validate's
    preflight on the tiny model with a video dataset config."""
    size = "14B" if "_14b_" in path.stem else "1.3B"
    check_preset(path, f"Wan-AI/Wan2.1-T2V-{size}-Diffusers", tiny, _video_dataset(tmp_path / "data"),
                 tmp_path / "out")


@pytest.mark.slow
def test_the_saved_clip_lora_loads_with_every_key_in_comfyui_and_wan_pipeline(model: object,
                                                                             clip_runs: SimpleNamespace) -> None:
    from diffusers import WanPipeline
    from safetensors.torch import load_file

    on_disk = load_file(clip_runs.file)
    patches, not_loaded = load_lora(on_disk, unet_key_map(_comfy_shapes(model.unet)))
    assert not_loaded == [] and len(patches) == 2 * 10  # 2 blocks x (8 attention + 2 feed-forward linears)
    pipe = WanPipeline(tokenizer=model.tokenizers[0], text_encoder=model.text_encoders[0], vae=model.vae,
                       scheduler=model.noise_scheduler, transformer=copy.deepcopy(model.unet).eval())
    pipe.load_lora_weights(clip_runs.file, adapter_name="trained")
    layers = [name for name, module in pipe.transformer.named_modules()
              if hasattr(module, "lora_A") and "trained" in module.lora_A]
    assert len(layers) == len(patches)


def test_clip_captions_are_cached_on_disk_beside_the_first_dataset(model: object, tmp_path: Path) -> None:
    from trainers.core.options import load_config
    from trainers.data.cache import CACHE_DIR
    from trainers.data.pipeline import build_video_pipeline
    from trainers.models.video_data import video_run_catalog

    config = _video_dataset(tmp_path)
    values = {"dataset_config": str(config), "model_family": "wan21"}
    (tmp_path / "cfg.toml").write_text("")
    cfg = load_config("lora", tmp_path / "cfg.toml", ["cache_text_encoder_outputs=true", "max_data_loader_n_workers=0",
                                                      "cache_text_encoder_outputs_to_disk=true"])
    accelerator = SimpleNamespace(is_main_process=True, num_processes=1, device=torch.device("cpu"))
    events = SimpleNamespace(warn=lambda message: None, emit=lambda event: None)
    run = dataclasses.replace(model, text_encoders=[copy.deepcopy(model.text_encoders[0])])
    data = build_video_pipeline(cfg, video_run_catalog(values, []).video, run, accelerator, events)
    assert any((tmp_path / "clips" / CACHE_DIR / "text").iterdir())
    batch = next(iter(data.loader))
    assert batch["prompt_embeds"].shape == (1, 512, 32) and "input_ids" not in batch
