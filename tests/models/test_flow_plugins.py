"""Flow families added as one-folder plug-ins on the flow layer (Chroma, Z-Image), end to end on tiny random-init
models of their real diffusers classes: a LoRA trains, samples and resumes exactly; its file has the key names
ComfyUI and sd-scripts/musubi-tuner read, diffusers' load_lora_weights takes every key, and it round-trips; Generate
renders with it; a finetune saves a folder that loads; Validate names the family. One trained run per family serves
every assertion."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch
from helpers import events, train
from PIL import Image

from trainers.core.options import BY_NAME
from trainers.demo import build_dataset
from trainers.methods.lora.file_format import read_lora_file
from trainers.models import family, load_model
from trainers.models.file_kind import model_kind
from trainers.models.chroma.tiny import build_tiny_chroma
from trainers.models.zimage.tiny import build_tiny_zimage

pytestmark = pytest.mark.slow  # every test here runs a trainer

FAST = {"resolution": "64", "train_batch_size": 2, "max_data_loader_n_workers": 0, "learning_rate": 1e-2,
        "network_dim": 4, "network_alpha": 2, "save_precision": "float"}


@dataclass(frozen=True)
class Plugin:
    name: str
    title: str
    build: Callable[[Path], Path]
    pipeline: str  # its diffusers pipeline class
    options: dict[str, Any]  # its flow options, as its preset sets them
    keys: tuple[str, ...]  # LoRA modules its file must have (ComfyUI's / sd-scripts' names)
    metadata: dict[str, Any]
    saves_single_files: bool = False  # finetunes also saved in the reference single-file layout


PLUGINS = {
    "chroma": Plugin(
        "chroma", "Chroma", build_tiny_chroma, "ChromaPipeline",
        {"timestep_sampling": "sigmoid", "model_prediction_type": "raw", "guidance_scale": 0.0,
         "apply_t5_attn_mask": True, "text_encoder_max_tokens": 32},
        ("lora_unet_double_blocks_0_img_attn_qkv", "lora_unet_double_blocks_0_txt_mlp_2",
         "lora_unet_single_blocks_0_linear1", "lora_unet_single_blocks_0_linear2"),
        {"ss_base_model_version": "chroma", "ss_model_type": "chroma", "ss_network_module": "networks.lora_flux",
         "modelspec.architecture": "chroma/lora", "ss_apply_t5_attn_mask": "True", "ss_timestep_sampling": "sigmoid"},
        saves_single_files=True),
    "zimage": Plugin(
        "zimage", "Z-Image", build_tiny_zimage, "ZImagePipeline",
        {"timestep_sampling": "shift", "discrete_flow_shift": 2.0, "weighting_scheme": "none"},
        ("lora_unet_layers_0_attention_qkv", "lora_unet_layers_0_attention_out", "lora_unet_layers_1_feed_forward_w2"),
        {"ss_base_model_version": "z_image", "ss_network_module": "networks.lora_zimage",
         "modelspec.architecture": "Z-Image/lora", "ss_timestep_sampling": "shift", "ss_discrete_flow_shift": "2.0"},
        saves_single_files=True),
}


@dataclass
class Runs:
    model_dir: Path
    out: Path
    straight_run: Path
    lora: dict[str, torch.Tensor]
    metadata: dict[str, str]
    resumed: dict[str, torch.Tensor]
    finetune: Path


@pytest.fixture(scope="module", params=sorted(PLUGINS))
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Plugin, Runs]:
    """A 2-step LoRA (a sample at its end, a state at step 1), the same resumed from step 1, a 2-step finetune."""
    plugin = PLUGINS[request.param]
    tmp = tmp_path_factory.mktemp(plugin.name)
    model_dir = plugin.build(tmp / "model")
    dataset = build_dataset(tmp / "data", folder="2_sks shape")
    common = {"pretrained_model_name_or_path": str(model_dir), "train_data_dir": str(dataset),
              "output_dir": str(tmp / "out"), **plugin.options, **FAST}
    assert train("lora", tmp / "straight", **common, max_train_steps=2, output_name="straight", save_every_n_steps=1,
                 save_state=True, sample_prompt_lines=["sks shape --n blurry --w 64 --h 64 --s 2 --l 2"],
                 sample_every_n_steps=2) == 0
    state = tmp / "out" / "straight-step00000001-state"
    assert train("lora", tmp / "resumed", **common, max_train_steps=2, output_name="resumed", resume=str(state)) == 0
    assert train("finetune", tmp / "finetune", **{**common, "learning_rate": 1e-3}, max_train_steps=2,
                 output_name="finetune") == 0
    own_names = family(plugin.name).lora_in_own_names  # the file's naming read back into the trained modules'
    lora, metadata = read_lora_file(tmp / "out" / "straight.safetensors")
    lora, resumed = own_names(lora), own_names(read_lora_file(tmp / "out" / "resumed.safetensors")[0])
    return plugin, Runs(model_dir, tmp / "out", tmp / "straight", lora, metadata, resumed, tmp / "out" / "finetune")


def test_lora_trains_samples_and_names_its_modules_as_comfyui_does(runs: tuple[Plugin, Runs]) -> None:
    plugin, run = runs
    evs = events(run.straight_run)
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2]
    sample = Path(next(e for e in evs if e["type"] == "sample")["path"])
    assert Image.open(sample).size == (64, 64)
    for key in plugin.keys:
        assert f"{key}.lora_down.weight" in run.lora and f"{key}.alpha" in run.lora, key
    assert not any(k.startswith("lora_te") for k in run.lora)  # its text encoder is not trained
    for key, value in plugin.metadata.items():
        assert str(run.metadata[key]) == value, key
    assert model_kind(run.out / "straight.safetensors") == f"{plugin.title} LoRA"  # as Browse lists it


def test_resumed_lora_equals_the_uninterrupted_one(runs: tuple[Plugin, Runs]) -> None:
    _, run = runs
    assert run.lora.keys() == run.resumed.keys()
    assert max((run.lora[k] - run.resumed[k]).abs().max().item() for k in run.lora) < 1e-6


def test_diffusers_loads_every_key_and_renders_what_was_trained(runs: tuple[Plugin, Runs]) -> None:
    import diffusers

    from trainers.methods.lora.network import LoRANetwork

    plugin, run = runs
    model = load_model(str(run.model_dir), "auto", torch.float32)
    converted = model.family.lora_for_pipeline(run.lora, model)
    pipeline = getattr(diffusers, plugin.pipeline)
    pipe = pipeline.from_pretrained(run.model_dir)
    base = _image(pipe)
    pipe.load_lora_weights(converted)
    loaded_modules = {name for name, module in pipe.transformer.named_modules() if hasattr(module, "lora_A")
                      and module.lora_A}
    assert loaded_modules == {k.removeprefix("transformer.").removesuffix(".lora_A.weight") for k in converted
                              if k.endswith("lora_A.weight")}
    with_lora = _image(pipe)
    assert (with_lora - base).abs().max() > 1e-4
    ours = pipeline.from_pretrained(run.model_dir)  # the LoRA network as training ran it
    network = LoRANetwork(ours.transformer, [], unet_key_style="own", network_dim=1, network_alpha=1,
                          train_text_encoder=False, modules_dim=LoRANetwork.modules_dim_from_state_dict(run.lora),
                          unet_targets=model.family.lora_targets(ours.transformer))
    network.load_kohya_state_dict(run.lora)
    assert _same(network.kohya_state_dict(torch.float32), run.lora)  # save -> load -> save is identical
    network.apply_to()
    assert torch.allclose(_image(ours), with_lora, atol=1e-5)


def test_generate_renders_with_and_without_the_lora(runs: tuple[Plugin, Runs], tmp_path: Path) -> None:
    from trainers.generate.options import GenerateConfig, LoraRef
    from trainers.generate.plan import Variant, build_plan
    from trainers.generate.renderer import Renderer

    _, run = runs
    cfg = GenerateConfig({"width": 64, "height": 64, "steps": 2, "cpu_threads": 1, "devices": "cpu",
                          "model": str(run.model_dir), "prompts": ["sks shape --n blurry --l 2"]})
    lora = str(run.out / "straight.safetensors")
    variants = [Variant("base"), Variant("w1", (LoraRef(lora, 1.0),))]
    plan = build_plan(cfg, tmp_path / "images", 7, variants)
    renderer = Renderer(cfg, "cpu", variants)
    base, one = (np.asarray(Image.open(renderer.render(item)[0]).convert("RGB")).astype(int) for item in plan.items)
    assert base.shape == (64, 64, 3) and np.abs(one - base).max() > 0


def test_finetune_saves_a_diffusers_folder_of_the_family(runs: tuple[Plugin, Runs]) -> None:
    from safetensors.torch import load_file

    plugin, run = runs
    index = json.loads((run.finetune / "model_index.json").read_text())
    assert index["_class_name"] == plugin.pipeline
    assert load_model(str(run.finetune), "auto", torch.float32).family.name == plugin.name
    trained = load_file(run.finetune / "transformer" / "diffusion_pytorch_model.safetensors")
    base = load_file(run.model_dir / "transformer" / "diffusion_pytorch_model.safetensors")
    assert max((trained[k] - base[k]).abs().max().item() for k in base) > 0


def test_validate_names_the_family(runs: tuple[Plugin, Runs]) -> None:
    from trainers.models.checks import model_issues

    plugin, run = runs
    values = {**{n: o.default for n, o in BY_NAME.items()}, **plugin.options, "min_snr_gamma": 5.0,
              "save_model_as": "safetensors", "pretrained_model_name_or_path": str(run.model_dir)}
    issues = model_issues(values)
    refused = ["min_snr_gamma"] + ([] if plugin.saves_single_files else ["save_model_as"])
    assert [i.field for i in issues] == refused  # before any weight loads or trains
    assert all(plugin.title in issue.message for issue in issues)


def _image(pipe: Any) -> torch.Tensor:
    return pipe(prompt="sks shape, red circle", num_inference_steps=2, height=64, width=64, output_type="pt",
                generator=torch.Generator().manual_seed(0), max_sequence_length=32).images


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k].to(a[k].dtype)) for k in a)
