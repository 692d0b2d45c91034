"""HiDream-O1-Image end to end on its tiny single file (trainers/models/hidream_o1/tiny.py), run in process as
`python -m trainers` would (three short trainings, hence slow): a 2-step LoRA (cached images and caption ids,
gradient checkpointing, as the presets) trains, samples and names its modules as ComfyUI reads them, resumed from
step 1 it equals the uninterrupted run, Generate renders with it, and a 2-step finetune saves Comfy-Org's single file,
which loads back as HiDream-O1-Image; blocks_to_swap trains the same LoRA."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from comfy_lora import PREFIX, load_lora, unet_key_map
from family_checks import FileRuns, check_generate_renders_the_lora, file_runs
from helpers import events, train
from PIL import Image
from safetensors.torch import load_file

from trainers.demo import build_dataset
from trainers.methods.lora.file_format import read_lora_file
from trainers.models import ModelFiles, load_model
from trainers.models.file_kind import model_kind
from trainers.models.hidream_o1.tiny import build_tiny_hidream_o1

pytestmark = pytest.mark.slow

FAST = {"resolution": "64", "train_batch_size": 2, "max_data_loader_n_workers": 0, "learning_rate": 1e-2,
        "network_dim": 4, "network_alpha": 2, "save_precision": "float", "timestep_sampling": "uniform",
        "weighting_scheme": "none", "noise_clip_std": 2.5}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> FileRuns:
    tmp = tmp_path_factory.mktemp("hidream_o1_runs")
    return file_runs(tmp, build_tiny_hidream_o1(tmp / "model"), FAST)


def test_the_lora_trains_samples_and_names_its_modules_as_comfyui_does(runs: FileRuns) -> None:
    evs = events(runs.straight_run)
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2]
    assert Image.open(next(e for e in evs if e["type"] == "sample")["path"]).size == (64, 64)
    for key in ("lora_unet_language_model_layers_0_self_attn_q_proj", "lora_unet_language_model_layers_1_mlp_down_proj",
                "lora_unet_x_embedder_proj1", "lora_unet_final_layer2_linear"):
        assert f"{key}.lora_down.weight" in runs.lora and f"{key}.alpha" in runs.lora, key
    assert {k: runs.metadata[k] for k in ("ss_base_model_version", "ss_network_module", "ss_timestep_sampling")} == {
        "ss_base_model_version": "hidream_o1", "ss_network_module": "networks.lora_hidream_o1",
        "ss_timestep_sampling": "uniform"}
    assert model_kind(runs.out / "straight.safetensors") == "HiDream-O1-Image LoRA"  # as Browse lists it
    comfy = {PREFIX + k: v.shape for k, v in load_file(runs.files["pretrained_model_name_or_path"]).items()}
    patches, unloaded = load_lora(runs.lora, unet_key_map(comfy))
    assert unloaded == [] and len(patches) == len({k.split(".")[0] for k in runs.lora})


def test_the_resumed_lora_equals_the_uninterrupted_one(runs: FileRuns) -> None:
    assert runs.lora.keys() == runs.resumed.keys()
    assert max((runs.lora[k] - runs.resumed[k]).abs().max().item() for k in runs.lora) < 1e-6


def test_generate_renders_with_and_without_the_lora(runs: FileRuns, tmp_path: Path) -> None:
    check_generate_renders_the_lora(runs, tmp_path)


def test_the_finetune_is_comfy_orgs_single_file_and_loads_back(runs: FileRuns) -> None:
    saved = load_file(runs.out / "finetune.safetensors")
    base = load_file(runs.files["pretrained_model_name_or_path"])
    assert saved.keys() == base.keys()
    assert max((saved[k] - base[k]).abs().max().item() for k in base) > 0
    assert all(torch.equal(saved[k], base[k]) for k in base if k.startswith("visual."))  # t2i: the tower is frozen
    loaded = load_model(str(runs.out / "finetune.safetensors"), "auto", torch.float32,
                        files=ModelFiles.from_values(runs.files))
    assert loaded.family.name == "hidream_o1"


def test_blocks_to_swap_trains_the_same_lora(tmp_path: Path) -> None:
    """Two of four decoder layers swapped (on the CPU: weights moved, never numbers): the LoRA trained without it."""
    files = build_tiny_hidream_o1(tmp_path / "model", layers=4)
    dataset = build_dataset(tmp_path / "data", folder="2_sks shape")
    common = {**files, "train_data_dir": str(dataset), **FAST, "max_train_steps": 1, "output_name": "lora",
              "gradient_checkpointing": True}
    assert train("lora", tmp_path / "swap", **common, output_dir=str(tmp_path / "swap-out"), blocks_to_swap=2) == 0
    assert train("lora", tmp_path / "plain", **common, output_dir=str(tmp_path / "plain-out")) == 0
    swapped, _ = read_lora_file(tmp_path / "swap-out" / "lora.safetensors")
    plain, _ = read_lora_file(tmp_path / "plain-out" / "lora.safetensors")
    assert swapped.keys() == plain.keys() and all(torch.equal(swapped[k], plain[k]) for k in plain)
