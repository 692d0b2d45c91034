"""Anima end to end on its tiny split files (trainers/models/anima/tiny.py), run in process as `python -m trainers`
would (three short trainings, hence slow): a 2-step LoRA with the LLM adapter's modules (cached latents and text, as
the presets) trains, samples and names its
modules as sd-scripts and ComfyUI read them, resumed from step 1 it equals the uninterrupted run, Generate renders
with it, and a 2-step finetune saves the published single file, which loads back as Anima."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from comfy_lora import PREFIX, load_lora, unet_key_map
from family_checks import FileRuns, check_generate_renders_the_lora, file_runs
from helpers import events
from PIL import Image
from safetensors.torch import load_file

from trainers.models import ModelFiles, load_model
from trainers.models.anima.tiny import build_tiny_anima
from trainers.models.file_kind import model_kind

pytestmark = pytest.mark.slow

FAST = {"resolution": "64", "train_batch_size": 2, "max_data_loader_n_workers": 0, "learning_rate": 1e-2,
        "network_dim": 4, "network_alpha": 2, "save_precision": "float", "timestep_sampling": "sigmoid",
        "discrete_flow_shift": 1.0}
ADAPTER = ["train_llm_adapter=True"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> FileRuns:
    tmp = tmp_path_factory.mktemp("anima_runs")
    return file_runs(tmp, build_tiny_anima(tmp / "model"), FAST, network_args=ADAPTER)


def test_the_lora_trains_samples_and_names_its_modules_as_sd_scripts_and_comfyui_do(runs: FileRuns) -> None:
    evs = events(runs.straight_run)
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2]
    assert Image.open(next(e for e in evs if e["type"] == "sample")["path"]).size == (64, 64)
    for key in ("lora_unet_blocks_0_self_attn_q_proj", "lora_unet_blocks_1_cross_attn_output_proj",
                "lora_unet_blocks_0_mlp_layer1", "lora_unet_llm_adapter_blocks_0_cross_attn_k_proj",
                "lora_unet_llm_adapter_blocks_1_mlp_2"):
        assert f"{key}.lora_down.weight" in runs.lora and f"{key}.alpha" in runs.lora, key
    assert not any(k.startswith("lora_te") for k in runs.lora)  # Qwen3 is not trained
    assert {k: runs.metadata[k] for k in ("ss_base_model_version", "ss_network_module", "modelspec.architecture",
                                          "ss_timestep_sampling", "ss_discrete_flow_shift")} == {
        "ss_base_model_version": "anima", "ss_network_module": "networks.lora_anima",
        "modelspec.architecture": "anima-preview/lora", "ss_timestep_sampling": "sigmoid",
        "ss_discrete_flow_shift": "1.0"}
    assert model_kind(runs.out / "straight.safetensors") == "Anima LoRA"  # as Browse lists it
    dit = load_file(runs.files["pretrained_model_name_or_path"])
    comfy = {PREFIX + k.removeprefix("net."): v.shape for k, v in dit.items()}  # ComfyUI's Anima model
    patches, unloaded = load_lora(runs.lora, unet_key_map(comfy))
    assert unloaded == [] and len(patches) == len({k.split(".")[0] for k in runs.lora})


def test_the_health_check_says_comfyui_loads_it_and_diffusers_has_no_loader(runs: FileRuns) -> None:
    from trainers.health.check import check_save

    report = check_save(runs.out / "straight.safetensors", "anima")
    loaders = report["checks"]["loading"]["loaders"]
    assert loaders["ComfyUI"]["status"] == "yes" and loaders["diffusers"]["status"] == "none"
    assert report["verdict"] == "healthy" and report["warnings"] == []


def test_the_resumed_lora_equals_the_uninterrupted_one(runs: FileRuns) -> None:
    assert runs.lora.keys() == runs.resumed.keys()
    assert max((runs.lora[k] - runs.resumed[k]).abs().max().item() for k in runs.lora) < 1e-6


def test_generate_renders_with_and_without_the_lora(runs: FileRuns, tmp_path: Path) -> None:
    check_generate_renders_the_lora(runs, tmp_path)


def test_the_finetune_is_the_published_single_file_and_loads_back_as_anima(runs: FileRuns) -> None:
    saved = load_file(runs.out / "finetune.safetensors")
    base = load_file(runs.files["pretrained_model_name_or_path"])
    assert saved.keys() == base.keys()  # `net.` names, the LLM adapter and the rope buffers: ComfyUI's file
    assert max((saved[k] - base[k]).abs().max().item() for k in base) > 0
    assert max((saved[k] - base[k]).abs().max().item() for k in base if k.startswith("net.llm_adapter.")) > 0
    loaded = load_model(str(runs.out / "finetune.safetensors"), "auto", torch.float32,
                        files=ModelFiles.from_values(runs.files))
    assert loaded.family.name == "anima"
