"""Qwen-Image as a one-folder flow plug-in, end to end on a tiny random-init model of its real diffusers classes: the
checks every flow plug-in passes (test_flow_plugins.py: LoRA trains, samples and resumes exactly, ComfyUI's and
musubi-tuner's key names, diffusers loads every key, round trip, Generate, finetune folder, Validate) on its runs."""
from __future__ import annotations

import pytest
import test_flow_plugins as shared
from plugin_runs import check_validate_names_the_family, trained_runs
from test_flow_plugins import (  # noqa: F401 - the shared checks, collected here on this family's runs
    test_diffusers_loads_every_key_and_renders_what_was_trained, test_finetune_saves_a_diffusers_folder_of_the_family,
    test_generate_renders_with_and_without_the_lora, test_lora_trains_samples_and_names_its_modules_as_comfyui_does,
    test_resumed_lora_equals_the_uninterrupted_one)

from trainers.models.qwen_image.tiny import build_tiny_qwen_image

pytestmark = pytest.mark.slow

PLUGIN = shared.Plugin(
    "qwen_image", "Qwen-Image", build_tiny_qwen_image, "QwenImagePipeline",
    {"timestep_sampling": "shift", "discrete_flow_shift": 2.2, "weighting_scheme": "none"},
    ("lora_unet_transformer_blocks_0_attn_to_q", "lora_unet_transformer_blocks_0_attn_add_k_proj",
     "lora_unet_transformer_blocks_1_attn_to_out_0", "lora_unet_transformer_blocks_1_img_mlp_net_0_proj",
     "lora_unet_transformer_blocks_1_txt_mlp_net_2"),
    {"ss_base_model_version": "qwen_image", "ss_network_module": "networks.lora_qwen_image",
     "modelspec.architecture": "Qwen-Image/lora", "ss_timestep_sampling": "shift", "ss_discrete_flow_shift": "2.2"})


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[shared.Plugin, shared.Runs]:
    return trained_runs(PLUGIN, tmp_path_factory)


def test_modulations_are_left_out_as_musubi_does(runs: tuple[shared.Plugin, shared.Runs]) -> None:
    _, run = runs
    assert not [k for k in run.lora if "_mod_" in k]


def test_validate_names_the_family_and_takes_both_layouts(runs: tuple[shared.Plugin, shared.Runs]) -> None:
    check_validate_names_the_family(runs)
