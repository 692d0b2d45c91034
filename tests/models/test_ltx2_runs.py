"""LTX-2 runs (slow: each trains the tiny model of the real diffusers classes in process): a 2-step LoRA from 3 clips
and an image renders an mp4 sample (video only: the audio is not rendered), saves the reference names that ComfyUI
and LTX2Pipeline load with every key, and a run resumed from its step-1 state ends with the uninterrupted run's
weights."""
from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from family_checks import clip_lora_runs
from test_ltx2 import loaded_in_comfyui_and_ltx2pipeline, video_dataset

from trainers.models.ltx2.tiny import build_tiny_ltx2


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_ltx2(tmp_path_factory.mktemp("ltx2") / "model")


@pytest.fixture(scope="module")
def clip_runs(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """A 2-step LoRA from 3 clips and an image (a 64-pixel sample at its end: 32-pixel buckets, 32x compression), the
    same resumed."""
    tmp = tmp_path_factory.mktemp("ltx2-clips")
    return clip_lora_runs(tiny, tmp, video_dataset(tmp / "data"), sample_side=64, discrete_flow_shift=4.7)


@pytest.mark.slow
def test_a_lora_run_from_clips_trains_samples_an_mp4_and_names_the_reference_modules(
        clip_runs: SimpleNamespace) -> None:
    import av
    from helpers import events

    evs = events(clip_runs.run)
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2]
    sample = Path(next(e for e in evs if e["type"] == "sample")["path"])
    assert sample.suffix == ".mp4" and sample.stat().st_size > 0
    with av.open(str(sample)) as container:
        assert not container.streams.audio  # its audio is not rendered
        stream = container.streams.video[0]
        assert len(list(container.decode(stream))) == 25 and float(stream.average_rate) == 24.0
    keys = {"lora_unet_transformer_blocks_0_attn1_to_q.lora_down.weight",
            "lora_unet_transformer_blocks_1_ff_net_2.alpha"}
    assert keys <= clip_runs.lora.keys() and not any("audio" in k for k in clip_runs.lora)
    assert clip_runs.metadata["ss_base_model_version"] == "ltx2"
    # windows: a (9 frames) 1 + 1, b (5) 1, c (12) 1 + 1, and the image
    assert clip_runs.metadata["ss_num_train_images"] == "6"


@pytest.mark.slow
def test_the_saved_clip_lora_loads_with_every_key_in_comfyui_and_ltx2pipeline(
        tiny: Path, clip_runs: SimpleNamespace) -> None:
    assert loaded_in_comfyui_and_ltx2pipeline(tiny, clip_runs.file) == ([], 2 * 10, 2 * 10)


@pytest.mark.slow
def test_a_resumed_clip_lora_equals_the_uninterrupted_one(clip_runs: SimpleNamespace) -> None:
    from helpers import events

    assert [e["step"] for e in events(clip_runs.resumed_run) if e["type"] == "progress"] == [2]
    assert clip_runs.lora.keys() == clip_runs.resumed.keys()
    assert max((clip_runs.lora[k] - clip_runs.resumed[k]).abs().max().item() for k in clip_runs.lora) < 1e-6
    assert any(v.abs().sum() > 0 for k, v in clip_runs.lora.items() if k.endswith("lora_up.weight"))


@pytest.mark.slow
def test_a_sample_is_a_short_mp4_rendered_through_its_pipeline(tiny: Path, tmp_path: Path) -> None:
    """Classifier-free guidance of the prompt's scale through LTX2Pipeline (video only), 25 frames at 24 fps."""
    import av

    from trainers.core.prompts import config_prompts
    from trainers.models import load_model
    from trainers.sampling.pipeline import generate_samples

    model = load_model(str(tiny), "auto", torch.float32)
    prompts = config_prompts("", ["a robot dancing --n blurry --w 96 --h 64 --s 2 --d 3"])
    (written,) = generate_samples(model, prompts, tmp_path, "step2", default_size=(96, 64), default_steps=2,
                                  default_cfg=3.0)
    assert written.suffix == ".mp4" and written.parent == tmp_path
    with av.open(str(written)) as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
        assert "a robot dancing" in container.metadata.get("comment", "")
    assert len(frames) == model.family.sample_frames == 25 and (frames[0].width, frames[0].height) == (96, 64)
    assert float(stream.average_rate) == model.family.frame_rate == 24.0


@pytest.mark.slow
@pytest.mark.parametrize("cached", [False, True])
def test_two_steps_from_clips_through_the_video_data_path(tiny: Path, tmp_path: Path, cached: bool) -> None:
    """As the presets train: build_video_pipeline's clip windows (latents and the connectors' packed caption states
    cached on disk, or neither) into the flow objective, 5D latents, the LoRA's file in the reference names."""
    import dataclasses
    import json

    from trainers.core.options import load_config
    from trainers.data.cache import CACHE_DIR
    from trainers.data.pipeline import build_video_pipeline
    from trainers.methods.lora.network import LoRANetwork
    from trainers.models import load_model
    from trainers.models.video_data import video_run_catalog
    from trainers.train.diffusion import NoiseOptions
    from trainers.train.flow import flow_loss

    model = load_model(str(tiny), "auto", torch.float32)
    config = video_dataset(tmp_path)
    (tmp_path / "cfg.toml").write_text("")
    flags = json.dumps(cached)
    cfg = load_config("lora", tmp_path / "cfg.toml", [
        f"cache_latents={flags}", f"cache_latents_to_disk={flags}", f"cache_text_encoder_outputs={flags}",
        f"cache_text_encoder_outputs_to_disk={flags}", "max_data_loader_n_workers=0"])
    accelerator = SimpleNamespace(is_main_process=True, num_processes=1, device=torch.device("cpu"))
    warned: list[str] = []
    events = SimpleNamespace(warn=warned.append, emit=lambda event: None)
    family = model.family.configured({**cfg.values, "timestep_sampling": "shift", "discrete_flow_shift": 4.7})
    run = dataclasses.replace(model, family=family, unet=copy.deepcopy(model.unet),
                              text_encoders=[copy.deepcopy(t) for t in model.text_encoders])
    catalog = video_run_catalog({"dataset_config": str(config), "model_family": "ltx2"}, []).video
    data = build_video_pipeline(cfg, catalog, run, accelerator, events)
    assert warned == []
    if cached:
        assert any((tmp_path / "clips" / CACHE_DIR / "text").iterdir())
    targets = family.lora_targets(run.unet)
    network = LoRANetwork(run.unet, [], unet_key_style="own", network_dim=4, network_alpha=2,
                          train_text_encoder=False, unet_targets=targets)
    network.apply_to()
    optimizer = torch.optim.AdamW(network.parameters(), lr=1e-2)

    def predictor(noisy: torch.Tensor, timesteps: torch.Tensor, ids: list[torch.Tensor] | None, sizes: object,
                  embeds: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        # cached: the packed states and their mask in the (hidden, pooled) slots, as the trainer's predictor reads them
        hidden, mask = family.encode_prompts(run.text_encoders, ids, 1) if embeds is None else embeds
        return family.denoise(run.unet, noisy, timesteps, hidden, mask, sizes)

    opts = NoiseOptions(seed=1, noise_offset=0.0, min_snr_gamma=None, prediction_type="flow")
    before = {k: v.clone() for k, v in network.kohya_state_dict(torch.float32).items()}
    for step, batch in zip(range(2), data.loader):
        assert ("prompt_embeds" in batch) == cached and ("latent_mean" in batch) == cached
        if cached:
            assert batch["prompt_embeds"].shape == (1, 1024, 64) and batch["pooled_embeds"].shape == (1, 1024)
        loss = flow_loss(predictor, data.model, batch, opts, torch.float32)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        assert torch.isfinite(loss), step
    after = network.kohya_state_dict(torch.float32)
    assert any(not torch.equal(before[k], after[k]) for k in after if k.endswith("lora_up.weight"))
    assert "lora_unet_transformer_blocks_1_attn2_to_v.lora_up.weight" in family.lora_file(after, run)


@pytest.mark.slow
def test_a_finetune_saves_a_folder_it_and_diffusers_load(tiny: Path, tmp_path: Path) -> None:
    """2 full-weight steps from clips: the transformer trained, Gemma 3 not; the folder is claimed again, and
    LTX2Pipeline loads it whole (its connectors, audio autoencoder and vocoder as they were)."""
    from diffusers import LTX2Pipeline
    from helpers import train

    from trainers.models import load_model
    from trainers.models.rules import folder_rules

    assert train("finetune", tmp_path / "run", pretrained_model_name_or_path=str(tiny),
                 dataset_config=str(video_dataset(tmp_path / "data")), output_dir=str(tmp_path / "out"),
                 max_data_loader_n_workers=0, learning_rate=1e-3, save_precision="float", timestep_sampling="shift",
                 discrete_flow_shift=4.7, max_train_steps=2, output_name="ft") == 0
    folder = tmp_path / "out" / "ft"
    assert folder_rules(folder).name == "ltx2"
    before, after = load_model(str(tiny), "auto", torch.float32), load_model(str(folder), "auto", torch.float32)
    trained = after.unet.state_dict()
    assert any(not torch.equal(v, trained[k]) for k, v in before.unet.state_dict().items())
    for ours, theirs in zip(before.text_encoders, after.text_encoders):
        assert all(torch.equal(v, theirs.state_dict()[k]) for k, v in ours.state_dict().items())
    pipe = LTX2Pipeline.from_pretrained(folder)
    assert type(pipe.vae).__name__ == "AutoencoderKLLTX2Video"
    assert type(pipe.connectors).__name__ == "LTX2TextConnectors" and type(pipe.vocoder).__name__ == "LTX2Vocoder"
    original = LTX2Pipeline.from_pretrained(tiny)
    assert all(torch.equal(v, pipe.connectors.state_dict()[k]) for k, v in original.connectors.state_dict().items())


@pytest.mark.slow
def test_a_lora_run_as_the_presets_train(tiny: Path, tmp_path: Path) -> None:
    """bf16 with gradient checkpointing (which the run asks of every text encoder, the connectors too), latents and
    caption states cached, Gemma 3 and the connectors stored in int8: two steps and a sample (a process of its own:
    this one's accelerator state is set without mixed precision)."""
    from helpers import events, run_trainer, sets

    dataset = video_dataset(tmp_path / "data")
    done = run_trainer(sets(pretrained_model_name_or_path=str(tiny), dataset_config=str(dataset),
                            output_dir=str(tmp_path / "out"), max_data_loader_n_workers=0, learning_rate=1e-2,
                            network_dim=4, network_alpha=2, timestep_sampling="shift", discrete_flow_shift=4.7,
                            max_train_steps=2, mixed_precision="bf16", gradient_checkpointing=True,
                            cache_latents=True, cache_text_encoder_outputs=True, network_train_unet_only=True,
                            text_encoder_precision="int8", output_name="presets",
                            sample_prompt_lines=["a clip --w 64 --h 64 --s 2"], sample_every_n_steps=2),
                       tmp_path / "run")
    assert done.returncode == 0, done.stderr[-3000:]
    evs = events(tmp_path / "run")
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2]
    assert Path(next(e for e in evs if e["type"] == "sample")["path"]).suffix == ".mp4"
