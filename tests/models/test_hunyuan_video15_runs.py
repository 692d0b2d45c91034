"""HunyuanVideo 1.5 runs (slow: each trains the tiny model of the real diffusers classes in process): a 2-step LoRA from
3 clips and an image renders an mp4 sample, saves ComfyUI's names that ComfyUI and the pipeline's transformer load
with every key, and a run resumed from its step-1 state ends with the uninterrupted run's weights."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from comfy_lora import load_lora, unet_key_map
from family_checks import check_clip_run_sampled, check_resumed_equals_straight, clip_lora_runs
from test_hunyuan_video15 import _comfy_shapes, video_dataset

from trainers.models.hunyuan_video15.tiny import build_tiny_hunyuan_video15


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_hunyuan_video15(tmp_path_factory.mktemp("hv15") / "model")


@pytest.fixture(scope="module")
def clip_runs(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """A 2-step LoRA from 3 clips and an image (a sample at its end, a state at step 1), the same resumed."""
    tmp = tmp_path_factory.mktemp("hv15-clips")
    return clip_lora_runs(tiny, tmp, video_dataset(tmp / "data"), discrete_flow_shift=2.0)


@pytest.mark.slow
def test_a_lora_run_from_clips_trains_samples_an_mp4_and_names_comfyuis_modules(clip_runs: SimpleNamespace) -> None:
    import av

    sample = check_clip_run_sampled(clip_runs)
    with av.open(str(sample)) as container:
        stream = container.streams.video[0]
        assert len(list(container.decode(stream))) == 25 and float(stream.average_rate) == 24.0
    keys = {"lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight", "lora_unet_double_blocks_1_txt_mlp_2.alpha"}
    assert keys <= clip_runs.lora.keys()
    assert clip_runs.metadata["ss_network_module"] == "networks.lora_hv_1_5"
    assert clip_runs.metadata["ss_base_model_version"] == "hunyuan_video_1_5"
    assert clip_runs.metadata["ss_num_train_images"] == "7"  # 6 clip windows and the image


@pytest.mark.slow
def test_the_saved_clip_lora_loads_with_every_key_in_comfyui_and_the_pipelines_transformer(
        tiny: Path, clip_runs: SimpleNamespace) -> None:
    from diffusers import HunyuanVideo15Transformer3DModel
    from safetensors.torch import load_file

    from trainers.models.hunyuan_video15.family import HUNYUAN_VIDEO15

    transformer = HunyuanVideo15Transformer3DModel.from_pretrained(tiny / "transformer").eval()
    on_disk = load_file(clip_runs.file)
    patches, not_loaded = load_lora(on_disk, unet_key_map(_comfy_shapes(transformer)))
    assert not_loaded == [] and len(patches) == 2 * 10  # 2 blocks x (2 streams x 5 fused linears)
    view = SimpleNamespace(unet=copy.deepcopy(transformer), text_encoders=[], family=HUNYUAN_VIDEO15)
    transformer.load_lora_adapter(HUNYUAN_VIDEO15.lora_for_pipeline(on_disk, view), prefix="transformer",
                                  adapter_name="trained")
    layers = [name for name, module in transformer.named_modules()
              if hasattr(module, "lora_A") and "trained" in module.lora_A]
    assert len(layers) == 2 * 14  # q, k and v apart in diffusers


@pytest.mark.slow
def test_a_resumed_clip_lora_equals_the_uninterrupted_one(clip_runs: SimpleNamespace) -> None:
    from helpers import events

    assert [e["step"] for e in events(clip_runs.resumed_run) if e["type"] == "progress"] == [2]
    check_resumed_equals_straight(clip_runs)
    assert any(v.abs().sum() > 0 for k, v in clip_runs.lora.items() if k.endswith("lora_up.weight"))


def test_a_sample_is_a_short_mp4_rendered_through_its_pipeline(tiny: Path, tmp_path: Path) -> None:
    """Classifier-free guidance of the prompt's scale through HunyuanVideo15Pipeline, 25 frames at 24 fps."""
    import av

    from trainers.core.prompts import config_prompts
    from trainers.models import load_model
    from trainers.sampling.pipeline import generate_samples

    model = load_model(str(tiny), "auto", torch.float32)
    prompts = config_prompts("", ['a sign reading "HI" --n blurry --w 48 --h 32 --s 2 --d 3'])
    (written,) = generate_samples(model, prompts, tmp_path, "step2", default_size=(48, 32), default_steps=2,
                                  default_cfg=3.0)
    assert written.suffix == ".mp4" and written.parent == tmp_path
    with av.open(str(written)) as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
        assert "a sign reading" in container.metadata.get("comment", "")
    assert len(frames) == model.family.sample_frames == 25 and (frames[0].width, frames[0].height) == (48, 32)
    assert float(stream.average_rate) == model.family.frame_rate == 24.0


@pytest.mark.slow
def test_a_finetune_saves_a_folder_it_and_diffusers_load(tiny: Path, tmp_path: Path) -> None:
    """2 full-weight steps from clips: the transformer trained, the text encoders not; the folder is claimed again,
    and HunyuanVideo15Pipeline loads it whole (the loaded folder's guider kept)."""
    from diffusers import HunyuanVideo15Pipeline
    from diffusers.guiders import ClassifierFreeGuidance
    from helpers import train

    from trainers.models import load_model
    from trainers.models.rules import folder_rules

    assert train("finetune", tmp_path / "run", pretrained_model_name_or_path=str(tiny),
                 dataset_config=str(video_dataset(tmp_path / "data")), output_dir=str(tmp_path / "out"),
                 max_data_loader_n_workers=0, learning_rate=1e-3, save_precision="float", timestep_sampling="shift",
                 discrete_flow_shift=2.0, max_train_steps=2, output_name="ft") == 0
    folder = tmp_path / "out" / "ft"
    assert folder_rules(folder).name == "hunyuan_video15"
    before, after = load_model(str(tiny), "auto", torch.float32), load_model(str(folder), "auto", torch.float32)
    trained = after.unet.state_dict()
    assert any(not torch.equal(v, trained[k]) for k, v in before.unet.state_dict().items())
    for ours, theirs in zip(before.text_encoders, after.text_encoders):
        assert all(torch.equal(v, theirs.state_dict()[k]) for k, v in ours.state_dict().items())
    pipe = HunyuanVideo15Pipeline.from_pretrained(folder)
    assert type(pipe.vae).__name__ == "AutoencoderKLHunyuanVideo15"
    assert isinstance(pipe.guider, ClassifierFreeGuidance) and pipe.guider.guidance_scale == 6.0


@pytest.mark.slow
@pytest.mark.parametrize("cached", [False, True])
def test_two_steps_from_clips_through_the_video_data_path(tiny: Path, tmp_path: Path, cached: bool) -> None:
    """As the presets train: build_video_pipeline's clip windows (latents and both encoders' packed caption states
    cached on disk, or neither) into the flow objective, 5D latents, the LoRA's file in ComfyUI's names."""
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
    family = model.family.configured({**cfg.values, "timestep_sampling": "shift", "discrete_flow_shift": 2.0})
    run = dataclasses.replace(model, family=family, unet=copy.deepcopy(model.unet),
                              text_encoders=[copy.deepcopy(t) for t in model.text_encoders])
    catalog = video_run_catalog({"dataset_config": str(config), "model_family": "hunyuan_video15"}, []).video
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
            assert batch["prompt_embeds"].shape == (1, 1000 + 256, 32) and batch["pooled_embeds"].shape == (1, 1256)
        loss = flow_loss(predictor, data.model, batch, opts, torch.float32)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        assert torch.isfinite(loss), step
    after = network.kohya_state_dict(torch.float32)
    assert any(not torch.equal(before[k], after[k]) for k in after if k.endswith("lora_up.weight"))
    assert "lora_unet_double_blocks_1_img_attn_qkv.lora_up.weight" in family.lora_file(after, run)


@pytest.mark.slow
def test_an_image_to_video_lora_trains_from_clips_and_samples_from_a_first_frame(tmp_path: Path) -> None:
    """I2V: a 2-step LoRA from clips (each step's first-frame condition), a sample rendered through
    HunyuanVideo15ImageToVideoPipeline from the prompt's --ci at its size, ComfyUI's names; cached latents taken; a
    finetune's folder keeps the guider, SigLIP and its processor, and diffusers loads it whole."""
    import av
    from diffusers import HunyuanVideo15ImageToVideoPipeline
    from helpers import events, train
    from PIL import Image

    from trainers.core.options import BY_NAME
    from trainers.methods.lora.file_format import read_lora_file
    from trainers.models.checks import model_issues

    tiny = build_tiny_hunyuan_video15(tmp_path / "model", i2v=True)
    first = tmp_path / "first.png"
    Image.new("RGB", (32, 32), (30, 160, 90)).save(first)
    values = {n: o.default for n, o in BY_NAME.items()}
    assert model_issues({**values, "pretrained_model_name_or_path": str(tiny), "cache_latents": True}) == []
    common = {"pretrained_model_name_or_path": str(tiny), "dataset_config": str(video_dataset(tmp_path / "data")),
              "output_dir": str(tmp_path / "out"), "max_data_loader_n_workers": 0, "learning_rate": 1e-2,
              "save_precision": "float", "timestep_sampling": "shift", "discrete_flow_shift": 2.0,
              "max_train_steps": 2}
    assert train("lora", tmp_path / "lora", **common, network_dim=4, network_alpha=2, output_name="i2v",
                 sample_prompt_lines=[f"a clip --ci {first} --w 32 --h 32 --s 2"], sample_every_n_steps=2) == 0
    sample = Path(next(e for e in events(tmp_path / "lora") if e["type"] == "sample")["path"])
    with av.open(str(sample)) as container:
        frames = list(container.decode(container.streams.video[0]))
    assert len(frames) == 25 and (frames[0].width, frames[0].height) == (32, 32)
    lora, _ = read_lora_file(tmp_path / "out" / "i2v.safetensors")
    assert "lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight" in lora
    assert any(v.abs().sum() > 0 for k, v in lora.items() if k.endswith("lora_up.weight"))
    assert train("finetune", tmp_path / "ft", **common, output_name="ft") == 0
    folder = tmp_path / "out" / "ft"
    index = json.loads((folder / "model_index.json").read_text())
    assert index["_class_name"] == "HunyuanVideo15ImageToVideoPipeline" and index["guider"][1]
    pipe = HunyuanVideo15ImageToVideoPipeline.from_pretrained(folder)
    assert type(pipe.image_encoder).__name__ == "SiglipVisionModel" and pipe.guider is not None
