"""LTX-2 image-to-video from an LTX2ImageToVideoPipeline folder (the tiny model of the real diffusers classes, saved
by that pipeline): the folder is claimed and trains from each clip's first frame as the pipeline conditions on its
image (that frame's clean latent in, its tokens at timestep 0, the frames after it scored), images train as
text-to-video, samples render through LTX2ImageToVideoPipeline from each prompt's --ci first frame (refused by name
without one), and a 2-step LoRA run (slow) trains and samples."""
from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import torch
from test_ltx2 import CAPTIONS, video_dataset

from trainers.models import load_model
from trainers.models.ltx2.rules import LTX2
from trainers.models.ltx2.tiny import build_tiny_ltx2
from trainers.models.rules import folder_rules


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_ltx2(tmp_path_factory.mktemp("ltx2") / "model")


@pytest.fixture(scope="module")
def i2v(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from diffusers import LTX2ImageToVideoPipeline

    folder = tmp_path_factory.mktemp("ltx2-i2v") / "model"
    LTX2ImageToVideoPipeline.from_pretrained(tiny).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def model(i2v: Path) -> object:
    return load_model(str(i2v), "auto", torch.float32)


def _run(model: object) -> object:
    family = model.family.configured({"timestep_sampling": "shift", "discrete_flow_shift": 4.7})
    return dataclasses.replace(model, family=family, unet=copy.deepcopy(model.unet))


def test_the_image_to_video_folder_is_claimed_and_trains_from_first_frames(tiny: Path, i2v: Path,
                                                                          model: object) -> None:
    assert folder_rules(i2v) is LTX2 and model.family.first_frame
    assert not load_model(str(tiny), "auto", torch.float32).family.first_frame
    assert type(model.family.build_pipeline(model, model.noise_scheduler)).__name__ == "LTX2ImageToVideoPipeline"


def test_denoise_conditions_on_the_first_frame_as_its_pipeline_does(model: object, i2v: Path) -> None:
    """The first latent frame the image's, clean; the video's timestep per token t x (1 - conditioning mask), the
    audio stream's and both cross-attentions' the step's (use_cross_timestep, as the pipeline calls it)."""
    from diffusers import LTX2ImageToVideoPipeline

    from trainers.models.ltx2.family import silent_audio

    pipe = LTX2ImageToVideoPipeline.from_pretrained(i2v)
    family = _run(model).family
    noisy, first, timesteps = torch.randn(2, 8, 3, 2, 3), torch.randn(2, 8, 1, 2, 3), torch.tensor([900.0, 100.0])
    hidden, mask = model.encode_texts(CAPTIONS, 1)
    family.slot.first = first
    with torch.no_grad():
        ours = family.denoise(model.unet, noisy, timesteps, hidden, mask, None)
        states, text_mask, _, _ = pipe.encode_prompt(CAPTIONS, do_classifier_free_guidance=False,
                                                     device=torch.device("cpu"), dtype=torch.float32)
        video, audio, connector_mask = pipe.connectors(states, text_mask, padding_side="left")
        conditioning = torch.zeros(2, 1, 3, 2, 3)
        conditioning[:, :, 0] = 1.0
        conditioning = pipe._pack_latents(conditioning).squeeze(-1)
        latents = pipe._pack_latents(torch.cat([first, noisy[:, :, 1:]], dim=2))
        track = silent_audio(model.unet.config, 2, 3, timesteps, 24.0)
        theirs = model.unet(hidden_states=latents, audio_hidden_states=track, encoder_hidden_states=video,
                            audio_encoder_hidden_states=audio, timestep=timesteps.unsqueeze(-1) * (1 - conditioning),
                            audio_timestep=timesteps, sigma=timesteps, encoder_attention_mask=connector_mask,
                            audio_encoder_attention_mask=connector_mask, num_frames=3, height=2, width=3, fps=24.0,
                            audio_num_frames=track.shape[1], use_cross_timestep=True, return_dict=False)[0]
    family.slot.first = None
    assert torch.allclose(ours, pipe._unpack_latents(theirs, 3, 2, 3), atol=1e-5)
    with torch.no_grad():  # without a first frame: the text-to-video call
        assert not torch.allclose(ours, family.denoise(model.unet, noisy, timesteps, hidden, mask, None), atol=1e-3)


def test_a_step_scores_the_frames_after_the_clean_first_one(model: object) -> None:
    """A clip: its first frame's latent in the slot while the step runs, that frame out of the loss; an image (1
    frame) has nothing after its first frame and trains as text-to-video."""
    from trainers.train.diffusion import NoiseOptions
    from trainers.train.flow import flow_loss

    run = _run(model)
    family, (states, text_mask) = run.family, model.encode_texts(CAPTIONS[:1], 1)
    calls: list[tuple[object, object]] = []  # (the loss mask the objective got, the slot's first frame then)

    def predictor(noisy: torch.Tensor, timesteps: torch.Tensor, *rest: object) -> torch.Tensor:
        batch = noisy.shape[0]
        return family.denoise(run.unet, noisy, timesteps, states.expand(batch, -1, -1),
                              text_mask.expand(batch, -1), None)

    def scored(predictor_: object, model_: object, batch: dict, opts: object, dtype: torch.dtype) -> torch.Tensor:
        first = None if family.slot.first is None else family.slot.first.clone()
        calls.append((batch.get("masks"), first))
        return flow_loss(predictor_, model_, batch, opts, dtype)

    objective = family.adapt_trainable(None, None, _Trainable(scored)).objective
    noise = NoiseOptions(seed=3, noise_offset=0.0, min_snr_gamma=None, prediction_type="flow")
    clip, image = torch.rand(2, 9, 3, 64, 96) * 2 - 1, torch.rand(1, 3, 64, 96)
    objective(predictor, run, {"pixels": clip, "keys": torch.tensor([[0, 0], [0, 1]])}, noise, torch.float32).backward()
    objective(predictor, run, {"pixels": image, "keys": torch.tensor([[0, 2]])}, noise, torch.float32)
    (clip_mask, clip_first), (image_mask, image_first) = calls
    assert clip_mask.shape == (2, 1, 2, 2, 3) and clip_mask[:, :, 0].max() == 0 and clip_mask[:, :, 1:].min() == 1
    with torch.no_grad():
        encoded = model.vae.encode(clip[:, :1].transpose(1, 2)).latent_dist.mode()
    assert torch.allclose(clip_first, family.vae_latents(encoded, model.vae), atol=1e-5)
    assert image_mask is None and image_first is None and family.slot.first is None


@dataclasses.dataclass
class _Trainable:
    objective: object


def test_a_sample_renders_from_its_first_frame_and_asks_for_one(model: object, tmp_path: Path) -> None:
    from PIL import Image

    from trainers.core.prompts import config_prompts
    from trainers.sampling.pipeline import generate_samples

    run = _run(model)
    Image.new("RGB", (64, 64), (200, 40, 40)).save(tmp_path / "first.png")
    prompts = config_prompts("", [f"a red fox --w 64 --h 64 --s 2 --ci {tmp_path / 'first.png'}"])
    (written,) = generate_samples(run, prompts, tmp_path, "step2", default_size=(64, 64), default_steps=2,
                                  default_cfg=1.0)
    assert written.suffix == ".mp4" and written.stat().st_size > 0
    with pytest.raises(ValueError, match="--ci"):
        run.family.edit_inputs([], 64, 64)


@pytest.mark.slow
def test_a_lora_run_from_clips_trains_and_samples_from_a_first_frame(i2v: Path, tmp_path: Path) -> None:
    from helpers import events, train
    from PIL import Image

    from trainers.methods.lora.file_format import read_lora_file

    Image.new("RGB", (64, 64), (40, 200, 40)).save(tmp_path / "first.png")
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=str(i2v),
                 dataset_config=str(video_dataset(tmp_path / "data")), output_dir=str(tmp_path / "out"),
                 max_data_loader_n_workers=0, learning_rate=1e-2, network_dim=4, network_alpha=2,
                 save_precision="float", timestep_sampling="shift", discrete_flow_shift=4.7, max_train_steps=2,
                 output_name="i2v", sample_prompt_lines=[f"a clip --w 64 --h 64 --s 2 --ci {tmp_path / 'first.png'}"],
                 sample_every_n_steps=2) == 0
    evs = events(tmp_path / "run")
    steps, samples = ([e.get(key) for e in evs if e["type"] == kind] for kind, key in (("progress", "step"),
                                                                                        ("sample", "path")))
    assert steps == [1, 2] and [Path(path).suffix for path in samples] == [".mp4"]
    lora, metadata = read_lora_file(tmp_path / "out" / "i2v.safetensors")
    assert metadata["ss_base_model_version"] == "ltx2" and not any("audio" in k for k in lora)
    assert "lora_unet_transformer_blocks_0_attn1_to_q.lora_up.weight" in lora
