"""Wan 2.2 TI2V 5B as text-to-video, on a tiny random-init model of its real diffusers classes (WanPipeline with
expand_timesteps, a 48-channel transformer, Wan 2.2's 48-channel 16x AutoencoderKLWan): the folder is claimed, clips
encode to 48-channel latents 16x smaller, the transformer is called as the pipeline calls it (one timestep per token,
all the step's), a 2-step LoRA trains from clips and an image, its file loads in WanPipeline with every key, and a
sample is an mp4 at 24 fps."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from family_checks import model_fixtures

from trainers.models.rules import folder_rules
from trainers.models.wan.rules import WAN21
from trainers.models.wan.ti2v.rules import WAN22_TI2V
from trainers.models.wan.ti2v.tiny import build_tiny_wan22_ti2v


tiny, model = model_fixtures(build_tiny_wan22_ti2v, "wan22-ti2v")


def test_the_folder_is_claimed_as_ti2v_5b(tiny: Path) -> None:
    assert folder_rules(tiny) is WAN22_TI2V
    index = json.loads((tiny / "model_index.json").read_text())
    assert index["expand_timesteps"] is True and not WAN21.claims_folder(index, {}, tiny)
    assert WAN22_TI2V.frame_rate == 24.0 and WAN22_TI2V.bucket_step == 32


def test_clips_encode_to_48_channels_16x_smaller(model: object) -> None:
    with torch.no_grad():
        clip = model.vae.encode(torch.rand(1, 3, 9, 64, 96) * 2 - 1).latent_dist.mean
        image = model.vae.encode(torch.rand(2, 3, 64, 96) * 2 - 1).latent_dist.mean
    assert clip.shape == (1, 48, 3, 4, 6) and image.shape == (2, 48, 1, 4, 6)


def test_denoise_is_the_pipelines_call_with_a_timestep_per_token(model: object) -> None:
    """WanPipeline(expand_timesteps) gives every token the step's timestep (text-to-video): the same output."""
    noisy, timesteps = torch.randn(2, 48, 2, 4, 4), torch.tensor([900.0, 100.0])
    hidden, mask = model.encode_texts(["a red fox", "waves"], 1)
    per_token = timesteps[:, None].expand(2, 2 * 2 * 2)  # latent frames x (h / 2) x (w / 2)
    with torch.no_grad():
        ours = model.family.denoise(model.unet, noisy, timesteps, hidden, mask, None)
        theirs = model.unet(hidden_states=noisy, timestep=per_token, encoder_hidden_states=hidden,
                            return_dict=False)[0]
    assert ours.shape == noisy.shape and torch.allclose(ours, theirs, atol=1e-5)


def test_a_sample_is_an_mp4_at_24_fps(model: object, tmp_path: Path) -> None:
    import av

    from trainers.core.prompts import config_prompts
    from trainers.sampling.pipeline import generate_samples

    (written,) = generate_samples(model, config_prompts("", ["a red fox --w 64 --h 64 --s 2"]), tmp_path, "step2",
                                  default_size=(64, 64), default_steps=2, default_cfg=1.0)
    with av.open(str(written)) as container:
        stream = container.streams.video[0]
        assert float(stream.average_rate) == 24.0 and stream.width == 64


@pytest.fixture(scope="module")
def clip_run(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    from helpers import train
    from family_checks import clips_dataset as _video_dataset

    from trainers.methods.lora.file_format import read_lora_file

    tmp = tmp_path_factory.mktemp("wan22-ti2v-run")
    assert train("lora", tmp / "run", pretrained_model_name_or_path=str(tiny),
                 dataset_config=str(_video_dataset(tmp / "data")), output_dir=str(tmp / "out"), output_name="ti2v",
                 max_data_loader_n_workers=0, learning_rate=1e-2, network_dim=4, network_alpha=2,
                 save_precision="float", timestep_sampling="shift", discrete_flow_shift=3.0, max_train_steps=2,
                 sample_prompt_lines=["a clip --w 32 --h 32 --s 2"], sample_every_n_steps=2) == 0
    lora, metadata = read_lora_file(tmp / "out" / "ti2v.safetensors")
    return SimpleNamespace(run=tmp / "run", file=tmp / "out" / "ti2v.safetensors", lora=lora, metadata=metadata)


@pytest.mark.slow
def test_a_two_step_lora_from_clips_samples_and_loads_in_wan_pipeline(clip_run: SimpleNamespace,
                                                                      model: object) -> None:
    from diffusers import WanPipeline
    from helpers import events

    evs = events(clip_run.run)
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2]
    assert Path(next(e for e in evs if e["type"] == "sample")["path"]).suffix == ".mp4"
    assert clip_run.metadata["ss_base_model_version"] == "wan22_ti2v_5b"
    assert "lora_unet_blocks_0_self_attn_q.lora_down.weight" in clip_run.lora
    pipe = WanPipeline(tokenizer=model.tokenizers[0], text_encoder=model.text_encoders[0], vae=model.vae,
                       scheduler=model.noise_scheduler, transformer=copy.deepcopy(model.unet).eval(),
                       expand_timesteps=True)
    pipe.load_lora_weights(clip_run.file, adapter_name="trained")
    layers = [n for n, m in pipe.transformer.named_modules() if hasattr(m, "lora_A") and "trained" in m.lora_A]
    assert len(layers) == 2 * 10  # 2 blocks x (8 attention + 2 feed-forward linears)


# --- ti2v_first_frame: trained as image-to-video, as WanImageToVideoPipeline runs the 5B ---


def _first_frame_family(model: object) -> object:
    from trainers.core.options import BY_NAME

    return model.family.configured({**{n: o.default for n, o in BY_NAME.items()}, "ti2v_first_frame": True,
                                    "timestep_sampling": "shift", "discrete_flow_shift": 3.0})


def test_the_first_frame_inputs_are_the_pipelines(model: object) -> None:
    """WanImageToVideoPipeline(expand_timesteps).prepare_latents' condition and mask: the first latent frame is the
    image's, clean, its tokens at timestep 0 (temp_ts = (mask[0][0][:, ::2, ::2] * t).flatten())."""
    from trainers.models.wan.ti2v.first_frame import conditioned_inputs, first_latent_frame

    family = _first_frame_family(model)
    pipe = family.build_pipeline(model, model.noise_scheduler)
    clip = torch.rand(1, 5, 3, 64, 64) * 2 - 1
    with torch.no_grad():
        _, condition, mask = pipe.prepare_latents(clip[:, 0], 1, 48, 64, 64, 5, torch.float32, torch.device("cpu"))
    first = first_latent_frame(family, model.vae, {"pixels": clip})
    assert torch.allclose(first, condition[:, :, :1], atol=1e-5)
    noisy, t = torch.randn(1, 48, 2, 4, 4), torch.tensor([700.0])
    model_input, per_token = conditioned_inputs(noisy, t, first, model.unet.config.patch_size)
    assert torch.allclose(model_input, (1 - mask) * condition + mask * noisy, atol=1e-5)
    assert torch.equal(per_token[0], (mask[0][0][:, ::2, ::2] * t).flatten())


def test_a_first_frame_step_scores_only_the_frames_after_it(model: object) -> None:
    import dataclasses

    from trainers.methods.lora.network import LoRANetwork
    from trainers.models.wan.ti2v.first_frame import first_frame_objective
    from trainers.train.diffusion import NoiseOptions
    from trainers.train.flow import flow_loss

    family = _first_frame_family(model)
    run = dataclasses.replace(model, family=family, unet=copy.deepcopy(model.unet))
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    run.unet.register_forward_pre_hook(lambda m, a, kw: seen.append((kw["hidden_states"], kw["timestep"])),
                                       with_kwargs=True)
    network = LoRANetwork(run.unet, [], unet_key_style="own", network_dim=4, network_alpha=2,
                          train_text_encoder=False, unet_targets=family.lora_targets(run.unet))
    network.apply_to()
    hidden, _ = model.encode_texts(["a red fox"], 1)
    scored: list[torch.Tensor] = []

    def inner(predictor: object, model_: object, batch: dict, opts: object, dtype: torch.dtype) -> torch.Tensor:
        if "masks" in batch:
            scored.append(batch["masks"])
        return flow_loss(predictor, model_, batch, opts, dtype)

    def predictor(noisy: torch.Tensor, timesteps: torch.Tensor, *rest: object) -> torch.Tensor:
        return family.denoise(run.unet, noisy, timesteps, hidden.expand(noisy.shape[0], -1, -1), None, None)

    objective = first_frame_objective(inner, family, family.slot)
    opts = NoiseOptions(seed=3, noise_offset=0.0, min_snr_gamma=None, prediction_type="flow")
    clip = torch.rand(2, 5, 3, 64, 64) * 2 - 1
    loss = objective(predictor, run, {"pixels": clip, "keys": torch.tensor([[0, 0], [0, 1]])}, opts, torch.float32)
    loss.backward()
    assert torch.isfinite(loss) and family.slot.first is None
    (mask,) = scored
    assert mask.shape == (2, 1, 2, 4, 4) and mask[:, :, 0].max() == 0 and mask[:, :, 1].min() == 1
    (model_input, timestep) = seen[0]
    first = family.vae_latents(model.vae.encode(clip[:, :1].transpose(1, 2)).latent_dist.mode(), model.vae)
    assert torch.allclose(model_input[:, :, :1], first, atol=1e-5)  # the first frame clean, at timestep 0
    assert timestep.shape == (2, 2 * 2 * 2) and timestep[:, :4].max() == 0 and timestep[:, 4:].min() > 0
    # an image (1 frame) has nothing after its first frame: it trains as text-to-video
    objective(predictor, run, {"pixels": torch.rand(1, 3, 64, 64), "keys": torch.tensor([[0, 2]])}, opts,
              torch.float32)
    assert len(scored) == 1 and seen[-1][1].ndim == 1


def test_a_first_frame_sample_renders_from_its_first_frame(model: object, tmp_path: Path) -> None:
    import dataclasses

    from PIL import Image

    from trainers.core.prompts import config_prompts
    from trainers.sampling.pipeline import generate_samples

    run = dataclasses.replace(model, family=_first_frame_family(model))
    Image.new("RGB", (64, 64), (200, 40, 40)).save(tmp_path / "first.png")
    prompts = config_prompts("", [f"a red fox --w 64 --h 64 --s 2 --ci {tmp_path / 'first.png'}"])
    (written,) = generate_samples(run, prompts, tmp_path, "step2", default_size=(64, 64), default_steps=2,
                                  default_cfg=1.0)
    assert written.suffix == ".mp4" and written.stat().st_size > 0


PRESETS = sorted((Path(__file__).resolve().parents[2] / "presets").glob("wan22_ti2v_5b_lora_*gb.toml"))


@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_each_preset_fits_its_tier_and_validates_on_clips(path: Path, tiny: Path, tmp_path: Path) -> None:
    """By the estimate for the published 5B (as its comment says, the caption pass too), and Validate's preflight
    on the tiny model with a video dataset config."""
    from family_checks import check_preset, clips_dataset

    check_preset(path, "Wan-AI/Wan2.2-TI2V-5B-Diffusers", tiny, clips_dataset(tmp_path / "data"), tmp_path / "out")
