"""End to end on the tiny SD3 and FLUX models: a LoRA trains, samples, saves in kohya's layout (the reference
implementations' module names, fused qkv), renders in diffusers' pipelines and in `generate`, and resumes."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import events, train
from PIL import Image
from safetensors import safe_open

from trainers.demo import build_dataset
from trainers.methods.lora.file_format import read_lora_file
from trainers.models import load_model

pytestmark = pytest.mark.slow  # every test here runs a trainer

FAST = {"resolution": "64", "train_batch_size": 2, "max_data_loader_n_workers": 0, "learning_rate": 1e-2,
        "network_dim": 4, "network_alpha": 2}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_dataset(tmp_path_factory.mktemp("flow data"), folder="2_sks shape")


def image(pipe, **kwargs: object) -> torch.Tensor:
    return pipe("sks shape, red circle", num_inference_steps=2, height=64, width=64, output_type="pt",
                generator=torch.Generator().manual_seed(0), **kwargs).images


def network_image(pipe, model_dir: Path, state: dict[str, torch.Tensor], **kwargs: object) -> torch.Tensor:
    """The pipeline's image with our own LoRA network (as training ran it) on its modules."""
    from trainers.methods.lora.network import LoRANetwork

    fam = load_model(str(model_dir), "auto", torch.float32).family
    encoders = [getattr(pipe, n) for n in ("text_encoder", "text_encoder_2", "text_encoder_3") if hasattr(pipe, n)]
    network = LoRANetwork(pipe.transformer, encoders, unet_key_style="own", network_dim=1, network_alpha=1,
                          modules_dim=LoRANetwork.modules_dim_from_state_dict(state),
                          unet_targets=fam.lora_targets(pipe.transformer))
    network.load_kohya_state_dict(state)
    network.apply_to()
    return image(pipe, **kwargs)


def test_flux_lora_trains_samples_and_loads_in_diffusers(tiny_flux_dir: Path, dataset: Path, tmp_path: Path) -> None:
    from diffusers import FluxPipeline

    out = tmp_path / "out"
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=str(tiny_flux_dir),
                 train_data_dir=str(dataset), output_dir=str(out), max_train_steps=3, timestep_sampling="shift",
                 discrete_flow_shift=3.1582, model_prediction_type="raw", guidance_scale=1.0, apply_t5_attn_mask=True,
                 t5xxl_max_token_length=64, sample_prompt_lines=["sks shape --w 64 --h 64 --s 2 --l 2"],
                 sample_every_n_steps=3, **FAST) == 0
    evs = events(tmp_path / "run")
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2, 3]
    assert Path(next(e for e in evs if e["type"] == "sample")["path"]).is_file()
    lora = out / "lora.safetensors"
    state, meta = read_lora_file(lora)
    assert state["lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight"].shape == (3 * 16, 4)  # q, k, v fused
    assert state["lora_unet_double_blocks_0_txt_attn_qkv.lora_down.weight"].shape == (4, 16)
    assert state["lora_unet_single_blocks_0_linear1.lora_up.weight"].shape == (3 * 16 + 64, 4)  # q, k, v, MLP in
    for key in ("lora_unet_double_blocks_0_img_mod_lin.alpha", "lora_unet_double_blocks_0_txt_mlp_2.lora_down.weight",
                "lora_unet_single_blocks_0_linear2.lora_up.weight", "lora_unet_single_blocks_0_modulation_lin.alpha",
                "lora_te1_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight"):
        assert key in state, key
    assert not any("transformer_blocks" in k or k.startswith("lora_te2") for k in state)  # T5 is not trained
    assert meta["ss_base_model_version"] == "flux1" and meta["ss_network_module"] == "networks.lora_flux"
    assert meta["modelspec.architecture"] == "flux-1-dev/lora" and "modelspec.prediction_type" not in meta
    assert (meta["ss_timestep_sampling"], meta["ss_model_prediction_type"]) == ("shift", "raw")

    pipe = FluxPipeline.from_pretrained(tiny_flux_dir)
    base = image(pipe, max_sequence_length=64)
    # diffusers' own reader of kohya FLUX files (it splits single blocks at the real model's widths only, so
    # those are left out here; tests/models/test_flow_families.py checks them at the real widths). It scales the
    # text encoder's tensors in place: it gets copies.
    pipe.load_lora_weights({k: v.clone() for k, v in state.items() if "linear1" not in k})
    kohya_read = image(pipe, max_sequence_length=64)
    assert (kohya_read - base).abs().max() > 1e-4
    model = load_model(str(tiny_flux_dir), "auto", torch.float32)
    ours = FluxPipeline.from_pretrained(tiny_flux_dir)
    ours.load_lora_weights({k: v for k, v in model.family.lora_for_pipeline(state, model).items()
                            if "single_transformer_blocks.0.attn" not in k and "proj_mlp" not in k})
    assert torch.allclose(image(ours, max_sequence_length=64), kohya_read, atol=1e-6)
    whole = FluxPipeline.from_pretrained(tiny_flux_dir)
    whole.load_lora_weights(model.family.lora_for_pipeline(state, model))
    trained = network_image(FluxPipeline.from_pretrained(tiny_flux_dir), tiny_flux_dir, state, max_sequence_length=64)
    assert torch.allclose(image(whole, max_sequence_length=64), trained, atol=1e-5)


def test_sd3_lora_with_cached_text_and_latents_loads_in_diffusers(tiny_sd3_dir: Path, dataset: Path,
                                                                   tmp_path: Path) -> None:
    from diffusers import StableDiffusion3Pipeline

    out = tmp_path / "out"
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=str(tiny_sd3_dir), train_data_dir=str(dataset),
                 output_dir=str(out), max_train_steps=3, network_train_unet_only=True, cache_text_encoder_outputs=True,
                 cache_latents=True, weighting_scheme="logit_normal", training_shift=3.0, apply_t5_attn_mask=True,
                 sample_prompt_lines=["sks shape --w 64 --h 64 --s 2"], sample_every_n_steps=3, **FAST) == 0
    state, meta = read_lora_file(out / "lora.safetensors")
    assert state["lora_unet_joint_blocks_0_x_block_attn_qkv.lora_up.weight"].shape == (3 * 16, 4)
    assert state["lora_unet_joint_blocks_0_x_block_attn2_qkv.lora_up.weight"].shape == (3 * 16, 4)  # SD3.5 medium
    assert state["lora_unet_joint_blocks_1_context_block_adaLN_modulation_1.lora_up.weight"].shape == (2 * 16, 4)
    for key in ("lora_unet_joint_blocks_0_context_block_attn_proj.alpha",
                "lora_unet_joint_blocks_1_x_block_mlp_fc2.lora_down.weight"):
        assert key in state, key
    assert "lora_unet_joint_blocks_1_context_block_attn_proj.alpha" not in state  # the last context block has none
    assert not any(k.startswith("lora_te") for k in state)
    assert meta["ss_base_model_version"] == "5-medium" and meta["ss_network_module"] == "networks.lora_sd3"
    assert meta["modelspec.architecture"] == "stable-diffusion-3-5-medium/lora"
    assert meta["ss_weighting_scheme"] == "logit_normal"

    # diffusers has no reader of kohya SD3 files: the family's conversion is what generate loads
    model = load_model(str(tiny_sd3_dir), "auto", torch.float32)
    pipe = StableDiffusion3Pipeline.from_pretrained(tiny_sd3_dir)
    base = image(pipe)
    pipe.load_lora_weights(model.family.lora_for_pipeline(state, model))
    loaded = image(pipe)
    assert (loaded - base).abs().max() > 1e-4
    trained = network_image(StableDiffusion3Pipeline.from_pretrained(tiny_sd3_dir), tiny_sd3_dir, state)
    assert torch.allclose(loaded, trained, atol=1e-5)


def straight_and_resumed(model_dir: Path, dataset: Path, tmp_path: Path, **options: object
                         ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, str]]:
    """A 4-step LoRA run straight through and one resumed from its step-2 state: (straight, resumed, metadata)."""
    common = {"pretrained_model_name_or_path": str(model_dir), "train_data_dir": str(dataset),
              "output_dir": str(tmp_path / "out"), "max_train_steps": 4, "save_precision": "float",
              "t5xxl_max_token_length": 32, **options, **FAST}
    assert train("lora", tmp_path / "straight", **common, output_name="straight", save_every_n_steps=2,
                 save_state=True) == 0
    state = tmp_path / "out" / "straight-step00000002-state"
    assert train("lora", tmp_path / "resumed", **common, output_name="resumed", resume=str(state)) == 0
    straight, meta = read_lora_file(tmp_path / "out" / "straight.safetensors")
    resumed, _ = read_lora_file(tmp_path / "out" / "resumed.safetensors")
    assert straight.keys() == resumed.keys()
    assert max((straight[k] - resumed[k]).abs().max().item() for k in straight) < 1e-6
    progress = [e for e in events(tmp_path / "resumed") if e["type"] == "progress"]
    assert [e["step"] for e in progress] == [3, 4]
    return straight, resumed, meta


def test_flux_resumes_to_the_same_lora(tiny_flux_dir: Path, dataset: Path, tmp_path: Path) -> None:
    straight_and_resumed(tiny_flux_dir, dataset, tmp_path, weighting_scheme="logit_normal")


def test_flux_split_qkv_lora_resumes_and_renders_at_the_trained_strength(tiny_flux_dir: Path, dataset: Path,
                                                                         tmp_path: Path) -> None:
    """split_qkv: q, k, v (and the single blocks' MLP input) each train their own rank-4 LoRA; the file holds them
    as one fused module of rank 12 (16) and alpha 6 (8), block-diagonal, which renders in diffusers as trained."""
    from diffusers import FluxPipeline

    straight, _, meta = straight_and_resumed(tiny_flux_dir, dataset, tmp_path, network_args=["split_qkv=True"])
    qkv, linear1 = "lora_unet_double_blocks_0_img_attn_qkv", "lora_unet_single_blocks_0_linear1"
    assert straight[f"{qkv}.lora_down.weight"].shape == (12, 16) and float(straight[f"{qkv}.alpha"]) == 6
    assert straight[f"{linear1}.lora_up.weight"].shape == (3 * 16 + 64, 16) and float(straight[f"{linear1}.alpha"]) == 8
    up = straight[f"{qkv}.lora_up.weight"]
    assert up[:16, 4:].abs().max() == 0 and up[16:32, 4:8].abs().max() > 0  # block-diagonal, trained blocks
    assert float(straight["lora_unet_double_blocks_0_img_attn_proj.alpha"]) == 2  # single layers as before
    assert "split_qkv" in meta["ss_network_args"]

    model = load_model(str(tiny_flux_dir), "auto", torch.float32)
    pipe = FluxPipeline.from_pretrained(tiny_flux_dir)
    base = image(pipe, max_sequence_length=64)
    pipe.load_lora_weights(model.family.lora_for_pipeline(straight, model))
    loaded = image(pipe, max_sequence_length=64)
    assert (loaded - base).abs().max() > 1e-4
    trained = network_image(FluxPipeline.from_pretrained(tiny_flux_dir), tiny_flux_dir, straight,
                            max_sequence_length=64)
    assert torch.allclose(loaded, trained, atol=1e-5)


def test_flux_in_dims_train_the_input_layers_and_render_in_diffusers(tiny_flux_dir: Path, dataset: Path,
                                                                      tmp_path: Path) -> None:
    from diffusers import FluxPipeline

    out = tmp_path / "out"
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=str(tiny_flux_dir),
                 train_data_dir=str(dataset), output_dir=str(out), max_train_steps=2, t5xxl_max_token_length=32,
                 network_args=["in_dims=[4,0,0,0,2]"], **FAST) == 0
    state, _ = read_lora_file(out / "lora.safetensors")
    assert state["lora_unet_img_in.lora_down.weight"].shape[0] == 4  # rank 4 on img_in, 2 on txt_in
    assert state["lora_unet_txt_in.lora_up.weight"].shape[1] == 2
    assert not any(k.startswith(("lora_unet_time_in", "lora_unet_vector_in", "lora_unet_guidance_in")) for k in state)
    assert state["lora_unet_img_in.lora_up.weight"].abs().max() > 0
    model = load_model(str(tiny_flux_dir), "auto", torch.float32)
    state = {k: v.float() for k, v in state.items()}
    without = {k: v for k, v in state.items() if not k.startswith(("lora_unet_img_in", "lora_unet_txt_in"))}
    renders = []
    for lora in (state, without):
        pipe = FluxPipeline.from_pretrained(tiny_flux_dir)
        pipe.load_lora_weights(model.family.lora_for_pipeline(lora, model))  # as generate and save_diffusers_lora
        renders.append(image(pipe, max_sequence_length=32))
    assert (renders[0] - renders[1]).abs().max() > 1e-4  # the input layers' LoRAs take part
    trained = network_image(FluxPipeline.from_pretrained(tiny_flux_dir), tiny_flux_dir, state, max_sequence_length=32)
    assert torch.allclose(renders[0], trained, atol=1e-5)


def test_generate_renders_flux_with_and_without_a_lora(tiny_flux_dir: Path, dataset: Path, tmp_path: Path) -> None:
    from trainers.generate.options import GenerateConfig, LoraRef
    from trainers.generate.plan import Variant, build_plan
    from trainers.generate.renderer import Renderer

    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=str(tiny_flux_dir),
                 train_data_dir=str(dataset), output_dir=str(tmp_path / "out"), max_train_steps=2,
                 t5xxl_max_token_length=32, **FAST) == 0
    lora = tmp_path / "out" / "lora.safetensors"
    cfg = GenerateConfig({"width": 64, "height": 64, "steps": 2, "cpu_threads": 1, "devices": "cpu",
                          "model": str(tiny_flux_dir), "prompts": ["sks shape --n blurry --l 2"]})
    variants = [Variant("base"), Variant("w1", (LoraRef(str(lora), 1.0),)), Variant("w0", (LoraRef(str(lora), 0.0),))]
    plan = build_plan(cfg, tmp_path / "images", 7, variants)
    renderer = Renderer(cfg, "cpu", variants)
    base, one, zero = (np.asarray(Image.open(renderer.render(item)[0]).convert("RGB")).astype(int)
                       for item in plan.items)
    assert base.shape == (64, 64, 3)
    assert np.abs(one - base).max() > 0 and np.array_equal(zero, base)
    with safe_open(str(lora), "pt") as f:
        assert json.loads(f.metadata()["ss_dataset_dirs"]) == {"2_sks shape": {"n_repeats": 2, "img_count": 8}}


def test_flux_finetune_saves_a_diffusers_folder_that_loads(tiny_flux_dir: Path, dataset: Path, tmp_path: Path) -> None:
    from diffusers import FluxPipeline
    from safetensors.torch import load_file

    out = tmp_path / "out"
    assert train("finetune", tmp_path / "run", pretrained_model_name_or_path=str(tiny_flux_dir),
                 train_data_dir=str(dataset), output_dir=str(out), max_train_steps=2, t5xxl_max_token_length=32,
                 save_precision="float", **{**FAST, "learning_rate": 1e-3}) == 0
    folder = out / "finetune"
    index = json.loads((folder / "model_index.json").read_text())
    assert index["_class_name"] == "FluxPipeline" and index["transformer"] == ["diffusers", "FluxTransformer2DModel"]
    assert "unet" not in index and index["tokenizer_2"][1].startswith("T5")
    assert load_model(str(folder), "auto", torch.float32).family.name == "flux"
    trained = load_file(folder / "transformer" / "diffusion_pytorch_model.safetensors")
    base = load_file(tiny_flux_dir / "transformer" / "diffusion_pytorch_model.safetensors")
    assert max((trained[k] - base[k]).abs().max().item() for k in base) > 0
    assert image(FluxPipeline.from_pretrained(folder), max_sequence_length=32).shape == (1, 3, 64, 64)


def test_options_flow_matching_cannot_honour_are_refused_before_loading(tiny_flux_dir: Path, dataset: Path,
                                                                        tmp_path: Path) -> None:
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=str(tiny_flux_dir),
                 train_data_dir=str(dataset), output_dir=str(tmp_path / "out"), max_train_steps=1, min_snr_gamma=5.0,
                 training_shift=2.0, **FAST) == 2
    error = next(e for e in events(tmp_path / "run") if e["type"] == "error")
    assert "min_snr_gamma" in error["message"] and "training_shift" in error["message"]


def test_flux_two_processes_reproduce_one_process(tiny_flux_dir: Path, dataset: Path, tmp_path: Path) -> None:

    from helpers import hook_env, run_trainer, sets, two_processes

    values = dict(pretrained_model_name_or_path=str(tiny_flux_dir), train_data_dir=str(dataset), resolution="64",
                  max_data_loader_n_workers=0, learning_rate=1.0, optimizer_args=["eps=1.0"], network_dim=4,
                  network_alpha=2, save_precision="float", keep_global_batch=True, train_batch_size=2,
                  max_train_steps=2, t5xxl_max_token_length=32, timestep_sampling="sigmoid",
                  model_prediction_type="raw")
    one = run_trainer(sets(**values, output_dir=str(tmp_path / "one")), tmp_path / "run1")
    assert one.returncode == 0, one.stderr[-3000:]
    launcher = two_processes()
    two = run_trainer(sets(**values, output_dir=str(tmp_path / "two"), num_processes=2), tmp_path / "run2", launcher,
                      env=hook_env(ACCELERATE_USE_CPU="1"))
    assert two.returncode == 0, two.stderr[-3000:]
    a, _ = read_lora_file(tmp_path / "one" / "lora.safetensors")
    b, _ = read_lora_file(tmp_path / "two" / "lora.safetensors")
    moved = max(t.abs().max().item() for k, t in a.items() if k.endswith("lora_up.weight"))
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert a.keys() == b.keys() and moved > 1e-3 and worst < 1e-5, worst


def test_fp8_base_trains_a_lora_on_8_bit_transformer_weights(tiny_flux_dir: Path, dataset: Path,
                                                             tmp_path: Path) -> None:
    from helpers import run_trainer, sets

    # its own process: accelerate's mixed precision is set once a process
    result = run_trainer(sets(pretrained_model_name_or_path=str(tiny_flux_dir), train_data_dir=str(dataset),
                              output_dir=str(tmp_path / "out"), max_train_steps=2, fp8_base=True,
                              mixed_precision="bf16", model_prediction_type="raw", t5xxl_max_token_length=32, **FAST),
                         tmp_path / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    losses = [e["loss"] for e in events(tmp_path / "run") if e["type"] == "progress"]
    assert len(losses) == 2 and all(np.isfinite(losses))
    state, _ = read_lora_file(tmp_path / "out" / "lora.safetensors")
    assert max(t.abs().max().item() for k, t in state.items() if k.endswith("lora_up.weight")) > 0
