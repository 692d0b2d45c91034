"""Wan 2.2 A14B, the two-expert pair, on a tiny random-init model of its real diffusers classes (two
WanTransformer3DModel experts and boundary_ratio in a WanPipeline folder): the folder is claimed, the boundary read as
musubi-tuner reads --timestep_boundary (the TI2V 5B folder is not the pair), each sample goes to the expert of its timestep (the high-noise LoRA only ever
sees timesteps at or above the boundary, the low-noise one those below), one expert trains on its range alone, and a
LoRA per expert loads in WanPipeline (the low-noise one with load_into_transformer_2=True) and ComfyUI with every key."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from family_checks import model_fixtures
from comfy_lora import load_lora, unet_key_map
from lora_networks import random_network

from trainers.core.options import BY_NAME
from trainers.models import load_model
from trainers.models.checks import model_issues
from trainers.models.rules import folder_rules
from trainers.models.wan.rules import WAN21
from trainers.models.wan.wan22.rules import WAN22, boundary_ratio
from trainers.models.wan.wan22.tiny import build_tiny_wan22

BOUNDARY = 0.875


tiny, model = model_fixtures(build_tiny_wan22, "wan22")


def _values(model_dir: Path, **options: object) -> dict[str, object]:
    return {**{n: o.default for n, o in BY_NAME.items()}, "pretrained_model_name_or_path": str(model_dir), **options}


def test_the_pair_is_claimed_as_wan22_and_ti2v_5b_is_not(tiny: Path, tmp_path: Path) -> None:
    assert folder_rules(tiny) is WAN22
    index = json.loads((tiny / "model_index.json").read_text())
    assert index["transformer_2"][1] == "WanTransformer3DModel" and index["boundary_ratio"] == BOUNDARY
    assert not WAN21.claims_folder(index, {}, tiny)
    ti2v = tmp_path / "ti2v"
    ti2v.mkdir()
    one = {k: v for k, v in index.items() if k not in ("transformer_2", "boundary_ratio")}
    (ti2v / "model_index.json").write_text(json.dumps({**one, "expand_timesteps": True}))
    assert folder_rules(ti2v).name == "wan22_ti2v"  # tests/models/test_wan22_ti2v.py


def test_timestep_boundary_is_read_as_musubi_reads_it(tiny: Path) -> None:
    assert boundary_ratio(None, 0.875) == 0.875 and boundary_ratio(None, None) == 0.875
    assert boundary_ratio(0.9, 0.875) == 0.9 and boundary_ratio(900, 0.875) == 0.9  # a timestep above 1
    assert model_issues(_values(tiny, timestep_boundary=900, train_expert="high_noise")) == []
    (issue,) = model_issues(_values(tiny, timestep_boundary=1000))
    assert issue.field == "timestep_boundary"
    (issue,) = WAN21.option_issues(_values(tiny, train_expert="low_noise"))  # Wan 2.2's own option
    assert issue.field == "train_expert" and "Wan 2.1" in issue.message
    (issue,) = model_issues(_values(tiny, num_processes=2))  # DDP: every LoRA parameter needs its gradient
    assert issue.field == "train_expert" and "one expert per run" in issue.message
    assert model_issues(_values(tiny, num_processes=2, train_expert="high_noise")) == []


def test_each_sample_goes_to_the_expert_of_its_timestep(model: object) -> None:
    pair = model.unet
    noisy, hidden = torch.randn(3, 16, 2, 4, 4), torch.randn(3, 7, 32)
    timesteps = torch.tensor([900.0, 100.0, 875.0])  # the boundary itself is the high-noise expert's (WanPipeline)
    with torch.no_grad():
        ours = model.family.denoise(pair, noisy, timesteps, hidden, None, None)
        high = pair.transformer(hidden_states=noisy, timestep=timesteps, encoder_hidden_states=hidden,
                                return_dict=False)[0]
        low = pair.transformer_2(hidden_states=noisy, timestep=timesteps, encoder_hidden_states=hidden,
                                 return_dict=False)[0]
    assert torch.allclose(ours[0], high[0], atol=1e-5) and torch.allclose(ours[2], high[2], atol=1e-5)
    assert torch.allclose(ours[1], low[1], atol=1e-5) and not torch.allclose(ours[1], high[1], atol=1e-3)


def _recorded(pair: torch.nn.Module) -> dict[str, list[float]]:
    """The timesteps each expert receives, from here on (forward pre-hooks)."""
    seen: dict[str, list[float]] = {"high_noise": [], "low_noise": []}
    for name, expert in zip(seen, pair.experts):
        expert.register_forward_pre_hook(
            lambda module, args, kwargs, name=name: seen[name].extend(kwargs["timestep"].flatten().tolist()),
            with_kwargs=True)
    return seen


def _steps(model: object, values: dict[str, object], steps: int) -> SimpleNamespace:
    """`steps` flow-matching steps of a batch of 6 clips on a copy of the pair with a LoRA on the trained
    expert(s) (placed as the family places it: offload_inactive_dit's placement on the CPU); the timesteps each
    expert received and the LoRA's state before and after."""
    import dataclasses

    from trainers.methods.lora.network import LoRANetwork
    from trainers.train.diffusion import NoiseOptions
    from trainers.train.flow import flow_loss

    family = model.family.configured({**{n: o.default for n, o in BY_NAME.items()}, "timestep_sampling": "shift",
                                      "discrete_flow_shift": 3.0, **values})
    run = dataclasses.replace(model, family=family, unet=copy.deepcopy(model.unet))
    offload = family.place_denoiser(run.unet, torch.device("cpu"))
    seen = _recorded(run.unet)
    torch.manual_seed(0)  # the LoRA's weights and the clips: the same in every call
    network = LoRANetwork(run.unet, [], unet_key_style="own", network_dim=4, network_alpha=2,
                          train_text_encoder=False, unet_targets=family.lora_targets(run.unet))
    network.apply_to()
    for parameter in network.parameters():  # the up weights start at zero: gradients reach the down ones too
        torch.nn.init.normal_(parameter, std=0.1)
    optimizer = torch.optim.SGD(network.parameters(), lr=1e-2)
    hidden, _ = model.encode_texts(["a red fox runs through snow"], 1)

    def predictor(noisy: torch.Tensor, timesteps: torch.Tensor, *rest: object) -> torch.Tensor:
        return family.denoise(run.unet, noisy, timesteps, hidden.expand(noisy.shape[0], -1, -1), None, None)

    opts = NoiseOptions(seed=3, noise_offset=0.0, min_snr_gamma=None, prediction_type="flow")
    sizes = {name: torch.zeros(6, 2) for name in ("original_size", "crop_top_left", "target_size")}
    before = {k: v.clone() for k, v in network.kohya_state_dict(torch.float32).items()}
    for step in range(steps):
        batch = {"pixels": torch.rand(6, 5, 3, 32, 32) * 2 - 1, "keys": torch.tensor([[step, i] for i in range(6)]),
                 **sizes}
        loss = flow_loss(predictor, run, batch, opts, torch.float32)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return SimpleNamespace(seen=seen, before=before, after=network.kohya_state_dict(torch.float32), family=family,
                           run=run, network=network, offload=offload)


def _changed(trained: SimpleNamespace, marker: str) -> bool:
    return any(not torch.equal(trained.before[k], trained.after[k]) for k in trained.after if marker in k)


def test_with_both_experts_each_lora_only_ever_sees_its_own_timesteps(model: object) -> None:
    """The issue's check: the high-noise LoRA only ever sees timesteps at or above the boundary."""
    trained = _steps(model, {}, 3)
    high, low = trained.seen["high_noise"], trained.seen["low_noise"]
    assert high and low  # 18 samples drawn over both ranges
    assert min(high) >= BOUNDARY * 1000 and max(low) < BOUNDARY * 1000
    assert len(high) + len(low) == 18
    assert _changed(trained, "lora_unet_high_noise_blocks_") and _changed(trained, "lora_unet_low_noise_blocks_")
    assert {k.split("_blocks_")[0] for k in trained.after} == {"lora_unet_high_noise", "lora_unet_low_noise"}


def _placements(pair: torch.nn.Module, offload: object) -> list[tuple[str, bool, bool]]:
    """From here on, at each expert's call (its forward and its recomputation in the backward): (the expert, whether
    its weights are its host copies, whether the other's are)."""
    calls: list[tuple[str, bool, bool]] = []
    for name, expert, other in (("high_noise", *pair.experts), ("low_noise", *pair.experts[::-1])):
        expert.register_forward_pre_hook(lambda m, a, kw, name=name, expert=expert, other=other: calls.append(
            (name, offload.on_host(expert), offload.on_host(other))), with_kwargs=True)
    return calls


def test_offload_inactive_dit_keeps_the_expert_not_called_on_the_host_and_trains_the_same(model: object) -> None:
    """The issue's check: with offload_inactive_dit the expert not being called has every weight in host memory (its
    host copy; the one called has a device copy), batches holding both experts' timesteps included (each expert's
    backward recomputes it with its weights brought back), and the LoRAs equal those trained without it."""
    import trainers.models.wan.wan22.experts as experts

    plain = _steps(model, {}, 3)
    assert plain.offload is None
    place = experts.InactiveOffload.__init__

    def placed(self: experts.InactiveOffload, pair: torch.nn.Module, *args: object) -> None:
        place(self, pair, *args)
        self.calls = _placements(pair, self)  # the test's hooks after the placement's

    experts.InactiveOffload.__init__ = placed  # type: ignore[method-assign]
    try:
        offloaded = _steps(model, {"offload_inactive_dit": True}, 3)
    finally:
        experts.InactiveOffload.__init__ = place  # type: ignore[method-assign]
    offload = offloaded.offload
    assert {name for name, _, _ in offload.calls} == {"high_noise", "low_noise"}
    assert all(not called_on_host and other_on_host for _, called_on_host, other_on_host in offload.calls)
    # 18 timesteps over both ranges: every step holds both experts', and their backward brings each back
    assert offload.moves >= 2 * 3 and len(offload.calls) == 4 * 3
    assert next(offloaded.run.unet.parameters()) is offloaded.run.unet.anchor  # where the loop puts its inputs
    assert offloaded.after.keys() == plain.after.keys()
    for key, tensor in plain.after.items():
        assert torch.allclose(offloaded.after[key], tensor, atol=1e-6), key
    assert _changed(offloaded, "lora_unet_high_noise_blocks_") and _changed(offloaded, "lora_unet_low_noise_blocks_")


@pytest.mark.parametrize("expert", ["high_noise", "low_noise"])
def test_one_expert_trains_on_its_range_alone(model: object, expert: str) -> None:
    trained = _steps(model, {"train_expert": expert, "timestep_boundary": 900}, 2)
    other = "low_noise" if expert == "high_noise" else "high_noise"
    assert trained.seen[other] == [] and len(trained.seen[expert]) == 12
    if expert == "high_noise":
        assert min(trained.seen[expert]) >= 900
    else:
        assert max(trained.seen[expert]) < 900
    # its file is the expert's LoRA in Wan 2.1's names (ComfyUI loads it on that expert)
    assert all(k.startswith("lora_unet_blocks_") for k in trained.after) and _changed(trained, "lora_unet_blocks_")
    assert trained.family.lora_file_parts(Path("x.safetensors"), trained.after) == {}


def _comfy_shapes(unet: torch.nn.Module) -> dict[str, torch.Size]:
    from comfy_lora import PREFIX

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


def test_a_lora_per_expert_loads_in_wan_pipeline_and_comfyui_with_every_key(model: object, tmp_path: Path) -> None:
    from diffusers import WanPipeline
    from safetensors.torch import save_file

    pair = copy.deepcopy(model.unet).eval()
    network, targets, state = random_network(model.family, pair)
    parts = model.family.lora_file_parts(tmp_path / "lora.safetensors", state)
    assert sorted(p.name for p in parts) == ["lora_high_noise.safetensors", "lora_low_noise.safetensors"]
    for path, part in parts.items():
        save_file(part, path)
        patches, not_loaded = load_lora(part, unet_key_map(_comfy_shapes(pair.transformer)))
        assert not_loaded == [] and len(patches) == len(targets) // 2
    with pytest.raises(ValueError, match="both experts"):
        model.family.lora_for_pipeline(state, model)
    pipe = WanPipeline(tokenizer=model.tokenizers[0], text_encoder=model.text_encoders[0], vae=model.vae,
                       scheduler=model.noise_scheduler, transformer=copy.deepcopy(pair.transformer),
                       transformer_2=copy.deepcopy(pair.transformer_2), boundary_ratio=BOUNDARY)
    pipe.load_lora_weights(tmp_path / "lora_high_noise.safetensors", adapter_name="high")
    pipe.load_lora_weights(tmp_path / "lora_low_noise.safetensors", adapter_name="low", load_into_transformer_2=True)
    for transformer, adapter in ((pipe.transformer, "high"), (pipe.transformer_2, "low")):
        layers = [n for n, m in transformer.named_modules() if hasattr(m, "lora_A") and adapter in m.lora_A]
        assert len(layers) == len(targets) // 2, adapter
    network.apply_to()  # the network as training runs it computes what diffusers does, expert by expert
    inputs = {"hidden_states": torch.randn(1, 16, 2, 4, 4), "encoder_hidden_states": torch.randn(1, 7, 32),
              "return_dict": False}
    with torch.no_grad():
        for t, theirs in ((900.0, pipe.transformer), (100.0, pipe.transformer_2)):
            step = torch.tensor([t])
            assert torch.allclose(theirs(timestep=step, **inputs)[0], pair(timestep=step, **inputs)[0], atol=1e-4)


def test_a_sample_renders_through_both_experts(model: object, tmp_path: Path) -> None:
    from trainers.core.prompts import config_prompts
    from trainers.sampling.pipeline import generate_samples

    seen = _recorded(model.unet)
    prompts = config_prompts("", ["a red fox --w 32 --h 32 --s 4 --d 3"])
    (written,) = generate_samples(model, prompts, tmp_path, "step2", default_size=(32, 32), default_steps=4,
                                  default_cfg=1.0)
    assert written.suffix == ".mp4"
    assert seen["high_noise"] and seen["low_noise"]
    assert min(seen["high_noise"]) >= BOUNDARY * 1000 > max(seen["low_noise"])


# --- Wan 2.2 I2V A14B: the first frame's mask and latent concatenated to the noisy latents ---


@pytest.fixture(scope="module")
def i2v_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_wan22(tmp_path_factory.mktemp("wan22-i2v") / "model", i2v=True)


@pytest.fixture(scope="module")
def i2v(i2v_folder: Path) -> object:
    return load_model(str(i2v_folder), "auto", torch.float32)


def test_the_i2v_pair_is_claimed_with_its_boundary_and_takes_cached_latents(i2v: object, i2v_folder: Path) -> None:
    folder = i2v_folder
    assert folder_rules(folder) is WAN22 and i2v.family.i2v and i2v.family.boundary == 0.9
    assert i2v.unet.transformer.config.in_channels == 36
    assert model_issues(_values(folder, cache_latents=True, cache_latents_to_disk=True)) == []


def test_the_first_frame_condition_is_the_pipelines(i2v: object) -> None:
    """WanImageToVideoPipeline.prepare_latents' condition of a clip's first frame: the same mask and latent."""
    from trainers.models.wan.wan22.i2v import first_frame_condition

    pipe = i2v.family.build_pipeline(i2v, i2v.noise_scheduler)
    clip = torch.rand(1, 5, 3, 32, 32) * 2 - 1
    with torch.no_grad():
        _, theirs = pipe.prepare_latents(clip[:, 0], 1, 16, 32, 32, 5, torch.float32, torch.device("cpu"))
    ours = first_frame_condition(i2v.vae, clip, torch.float32)
    assert ours.shape == theirs.shape == (1, 20, 2, 4, 4) and torch.allclose(ours, theirs, atol=1e-5)
    assert ours[:, :4, 0].min() == 1 and ours[:, :4, 1:].max() == 0  # the mask: the first latent frame only


def test_an_i2v_step_trains_both_experts_on_the_first_frame_condition(i2v: object) -> None:
    import dataclasses

    from trainers.methods.lora.network import LoRANetwork
    from trainers.models.wan.wan22.i2v import conditioned_objective
    from trainers.train.diffusion import NoiseOptions
    from trainers.train.flow import flow_loss

    family = i2v.family.configured({**{n: o.default for n, o in BY_NAME.items()}, "timestep_sampling": "shift",
                                    "discrete_flow_shift": 3.0})
    run = dataclasses.replace(i2v, family=family, unet=copy.deepcopy(i2v.unet))
    seen = _recorded(run.unet)
    inputs: list[torch.Tensor] = []
    run.unet.transformer.register_forward_pre_hook(lambda m, a, kw: inputs.append(kw["hidden_states"]),
                                                   with_kwargs=True)
    network = LoRANetwork(run.unet, [], unet_key_style="own", network_dim=4, network_alpha=2,
                          train_text_encoder=False, unet_targets=family.lora_targets(run.unet))
    network.apply_to()
    hidden, _ = i2v.encode_texts(["a red fox"], 1)

    def predictor(noisy: torch.Tensor, timesteps: torch.Tensor, *rest: object) -> torch.Tensor:
        return family.denoise(run.unet, noisy, timesteps, hidden.expand(noisy.shape[0], -1, -1), None, None)

    objective = conditioned_objective(flow_loss, family.slot)
    opts = NoiseOptions(seed=3, noise_offset=0.0, min_snr_gamma=None, prediction_type="flow")
    pixels = torch.rand(6, 5, 3, 32, 32) * 2 - 1
    loss = objective(predictor, run, {"pixels": pixels, "keys": torch.tensor([[0, i] for i in range(6)])}, opts,
                     torch.float32)
    loss.backward()
    assert torch.isfinite(loss) and family.slot.condition is None  # cleared after the step
    assert seen["high_noise"] and seen["low_noise"] and min(seen["high_noise"]) >= 900 > max(seen["low_noise"])
    assert inputs[0].shape[1] == 36  # 16 noisy + 4 mask + 16 image latent channels
    grads = [p.grad for p in network.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    with pytest.raises(ValueError, match="made without it"):  # a cache of latents alone (no first frame)
        objective(predictor, run, {"latent_mean": torch.zeros(1), "keys": torch.tensor([[0, 0]])}, opts,
                  torch.float32)


def test_an_i2v_sample_renders_from_its_first_frame(i2v: object, tmp_path: Path) -> None:
    from family_checks import check_sample_renders_from_a_first_frame

    check_sample_renders_from_a_first_frame(i2v, tmp_path)
    with pytest.raises(ValueError, match="--ci"):
        i2v.family.edit_inputs([], 32, 32)


# --- runs (slow): a 2-step LoRA from clips through the trainer, both experts ---


@pytest.fixture(scope="module")
def pair_run(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """A 2-step LoRA of both experts from 3 clips and an image (a sample at its end), the timesteps each expert got."""
    from helpers import train
    from family_checks import clips_dataset as _video_dataset

    from trainers.models.wan.wan22 import experts

    tmp = tmp_path_factory.mktemp("wan22-run")
    seen: dict[str, list[float]] = {"high_noise": [], "low_noise": []}
    init = experts.ExpertPair.__init__

    def recording(self: experts.ExpertPair, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)
        for name, expert in zip(seen, self.experts):
            expert.register_forward_pre_hook(
                lambda m, a, kw, name=name: seen[name].extend(kw["timestep"].flatten().tolist()), with_kwargs=True)

    experts.ExpertPair.__init__ = recording  # type: ignore[method-assign]
    try:
        assert train("lora", tmp / "run", pretrained_model_name_or_path=str(tiny),
                     dataset_config=str(_video_dataset(tmp / "data")), output_dir=str(tmp / "out"),
                     output_name="pair", max_data_loader_n_workers=0, learning_rate=1e-2, network_dim=4,
                     network_alpha=2, save_precision="float", timestep_sampling="shift", discrete_flow_shift=3.0,
                     max_train_steps=2, sample_prompt_lines=["a clip --w 32 --h 32 --s 4"],
                     sample_every_n_steps=2) == 0
    finally:
        experts.ExpertPair.__init__ = init  # type: ignore[method-assign]
    return SimpleNamespace(run=tmp / "run", out=tmp / "out", seen=seen)


@pytest.mark.slow
def test_a_pair_run_saves_a_lora_per_expert_and_samples_an_mp4(pair_run: SimpleNamespace, model: object) -> None:
    from helpers import events
    from safetensors.torch import load_file

    from trainers.methods.lora.file_format import read_lora_file

    evs = events(pair_run.run)
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2]
    assert Path(next(e for e in evs if e["type"] == "sample")["path"]).suffix == ".mp4"
    combined = load_file(pair_run.out / "pair.safetensors")
    high, metadata = read_lora_file(pair_run.out / "pair_high_noise.safetensors")
    low = load_file(pair_run.out / "pair_low_noise.safetensors")
    assert len(high) == len(low) == len(combined) // 2 and all(k.startswith("lora_unet_blocks_") for k in high)
    assert metadata["ss_network_module"] == "networks.lora_wan" and metadata["ss_train_expert"] == "both"
    for name, part in (("high_noise", high), ("low_noise", low)):
        for key, tensor in part.items():
            assert torch.equal(tensor, combined[f"lora_unet_{name}_{key.removeprefix('lora_unet_')}"])
    # training and the sample: each expert only ever got its own timesteps
    assert min(pair_run.seen["high_noise"]) >= BOUNDARY * 1000 > max(pair_run.seen["low_noise"])


PRESETS = sorted((Path(__file__).resolve().parents[2] / "presets").glob("wan22_t2v_a14b_lora_*gb.toml"))


@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_each_preset_fits_its_tier_and_validates_on_clips(path: Path, tiny: Path, tmp_path: Path) -> None:
    """By the estimate for the published A14B pair (both experts' weights, a LoRA on each, one expert's
    activations), as its comment says, and Validate's preflight on the tiny pair with a video dataset config."""
    from family_checks import check_preset, clips_dataset

    check_preset(path, "Wan-AI/Wan2.2-T2V-A14B-Diffusers", tiny, clips_dataset(tmp_path / "data"), tmp_path / "out")


@pytest.mark.slow
def test_a_resumed_pair_lora_equals_the_uninterrupted_one(tiny: Path, tmp_path: Path) -> None:
    """Both experts' LoRAs (the run's file holds both) resumed from the step-1 state equal the straight run's."""
    from helpers import resumed_saves
    from family_checks import clips_dataset as _video_dataset

    straight, resumed = resumed_saves("lora", tmp_path, pretrained_model_name_or_path=str(tiny),
                                      dataset_config=str(_video_dataset(tmp_path / "data")),
                                      max_data_loader_n_workers=0, learning_rate=1e-2, network_dim=4,
                                      network_alpha=2, timestep_sampling="shift", discrete_flow_shift=3.0)
    assert straight.keys() == resumed.keys() and any("low_noise" in k for k in straight)
    assert max((straight[k] - resumed[k]).abs().max().item() for k in straight) < 1e-6
    assert (tmp_path / "out" / "straight_high_noise.safetensors").exists()


def test_a_musubi_image_dataset_config_trains_its_images_as_1_frame_clips(tmp_path: Path) -> None:
    from PIL import Image

    from trainers.models.video_data import is_video_run, video_run_catalog

    images = tmp_path / "images"
    images.mkdir()
    for name, color in (("red", (200, 40, 40)), ("blue", (40, 40, 200))):
        Image.new("RGB", (32, 32), color).save(images / f"{name}.png")
        (images / f"{name}.txt").write_text(f"a {name} square")
    config = tmp_path / "dataset.toml"
    config.write_text(f'[general]\nresolution = [32, 32]\n\n[[datasets]]\nimage_directory = "{images}"\n')
    values = {"dataset_config": str(config), "model_family": "wan22"}
    assert is_video_run(values) and not is_video_run({**values, "model_family": "zimage"})
    clips = video_run_catalog(values, [])
    assert clips.num_train_samples == 2 and all(c.is_image and len(c.frames) == 1 for c in clips.video.clips)


def test_cached_i2v_latents_keep_each_windows_first_frame_and_train_as_encoded(i2v: object, tmp_path: Path) -> None:
    """The issue's check: with cache_latents the first frame's latent is cached with each window, and a step gives
    the loss of the condition encoded from its pixels without running the VAE."""
    from wan_i2v_checks import check_cached_condition_trains_as_encoded

    check_cached_condition_trains_as_encoded(i2v, tmp_path, {"first_frame"})


@pytest.mark.slow
def test_a_cached_i2v_pair_run_equals_the_uncached_one_and_resumes_exactly(i2v_folder: Path, tmp_path: Path) -> None:
    from wan_i2v_checks import check_cached_runs_equal_uncached

    check_cached_runs_equal_uncached(i2v_folder, tmp_path)


@pytest.mark.slow
def test_a_run_with_offload_inactive_dit_equals_one_without_and_samples(tiny: Path, tmp_path: Path) -> None:
    """Through the trainer: the session places the pair with the expert not called in host memory (offload_inactive_
    dit), the steps and a sample bring each expert when its timesteps come, and the LoRAs equal a run's without it."""
    from helpers import events, train
    from family_checks import clips_dataset
    from safetensors.torch import load_file

    import trainers.models.wan.wan22.experts as experts

    dataset = clips_dataset(tmp_path / "data")
    placed: list[experts.InactiveOffload] = []
    place = experts.InactiveOffload.__init__

    def recording(self: experts.InactiveOffload, *args: object) -> None:
        place(self, *args)
        placed.append(self)

    common = {"pretrained_model_name_or_path": str(tiny), "dataset_config": str(dataset),
              "output_dir": str(tmp_path / "out"), "max_data_loader_n_workers": 0, "learning_rate": 1e-2,
              "network_dim": 4, "network_alpha": 2, "save_precision": "float", "timestep_sampling": "shift",
              "discrete_flow_shift": 3.0, "max_train_steps": 3,
              # SGD: the loaded weights' copies compute on the CPU within float noise of the loaded (mmap'ed,
              # unaligned) ones, which Adam's first steps would blow up
              "optimizer_type": "SGD"}
    experts.InactiveOffload.__init__ = recording  # type: ignore[method-assign]
    try:
        assert train("lora", tmp_path / "offload", **common, output_name="offload", offload_inactive_dit=True,
                     sample_prompt_lines=["a clip --w 32 --h 32 --s 4"], sample_every_n_steps=3) == 0
    finally:
        experts.InactiveOffload.__init__ = place  # type: ignore[method-assign]
    assert train("lora", tmp_path / "plain", **common, output_name="plain") == 0
    (offload,) = placed
    assert offload.moves >= 2  # the sample at its end goes through both experts
    (parked,) = [expert for expert in offload.experts if expert is not offload.active]
    assert offload.on_host(parked) and not offload.on_host(offload.active)
    assert next(e for e in events(tmp_path / "offload") if e["type"] == "sample")
    ours, theirs = (load_file(tmp_path / "out" / f"{name}.safetensors") for name in ("offload", "plain"))
    assert ours.keys() == theirs.keys() and any("low_noise" in k for k in ours)
    assert max((ours[k] - theirs[k]).abs().max().item() for k in ours) < 1e-6
    assert any(v.abs().max() > 1e-4 for k, v in ours.items() if "lora_up" in k)  # it trained


I2V_PRESETS = sorted((Path(__file__).resolve().parents[2] / "presets").glob("wan22_i2v_a14b_lora_*gb.toml"))


@pytest.mark.parametrize("path", I2V_PRESETS, ids=[p.stem for p in I2V_PRESETS])
def test_each_i2v_preset_fits_its_tier_caches_and_validates_on_clips(path: Path, i2v_folder: Path,
                                                                     tmp_path: Path) -> None:
    """By the estimate for the published I2V A14B pair, as its comment says, with latents cached (the first frame's
    latent with them), and Validate's preflight on the tiny I2V pair."""
    from family_checks import check_preset, clips_dataset

    from trainers.core.options import load_config

    check_preset(path, "Wan-AI/Wan2.2-I2V-A14B-Diffusers", i2v_folder, clips_dataset(tmp_path / "data"),
                 tmp_path / "out")
    assert load_config("lora", path, []).cache_latents


def test_offload_inactive_dit_keeps_one_experts_weights_on_the_card_by_the_estimate() -> None:
    from trainers.core.options import load_config
    from trainers.memory_estimate import estimate_memory

    path = I2V_PRESETS[-1]  # 80 GB: bf16, no blocks swapped
    model = 'pretrained_model_name_or_path="Wan-AI/Wan2.2-I2V-A14B-Diffusers"'
    offloaded = estimate_memory(load_config("lora", path, [model]))
    both = estimate_memory(load_config("lora", path, [model, "offload_inactive_dit=false"]))
    assert offloaded.gpu["denoiser weights"] == pytest.approx(both.gpu["denoiser weights"] / 2)
    parked = offloaded.host["the denoiser's part not running (pinned)"]
    assert parked == pytest.approx(offloaded.gpu["denoiser weights"])
    assert both.card_gb - offloaded.card_gb > 25  # one 14B expert in bf16 less on the card
    (issue,) = [i for i in WAN22.option_issues(_values(Path("x"), offload_inactive_dit=True, blocks_to_swap=8))
                if i.field == "offload_inactive_dit"]
    assert "blocks_to_swap" in issue.message
