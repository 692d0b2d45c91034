"""Lumina Image 2.0 as a one-folder flow plug-in, end to end on a tiny random-init model of its real diffusers
classes: the checks every flow plug-in passes (test_flow_plugins.py: LoRA trains, samples and resumes exactly,
sd-scripts' and ComfyUI's key names, diffusers loads every key, round trip, Generate, finetune folder, Validate)."""
from __future__ import annotations

import pytest
import test_flow_plugins as shared
from plugin_runs import check_validate_names_the_family, trained_runs
from test_flow_plugins import (  # noqa: F401 - the shared checks, collected here on this family's runs
    test_diffusers_loads_every_key_and_renders_what_was_trained, test_finetune_saves_a_diffusers_folder_of_the_family,
    test_generate_renders_with_and_without_the_lora, test_lora_trains_samples_and_names_its_modules_as_comfyui_does,
    test_resumed_lora_equals_the_uninterrupted_one)

from trainers.models.lumina2.tiny import build_tiny_lumina2

pytestmark = pytest.mark.slow

PLUGIN = shared.Plugin(
    "lumina2", "Lumina 2", build_tiny_lumina2, "Lumina2Pipeline",
    {"timestep_sampling": "shift", "discrete_flow_shift": 6.0, "model_prediction_type": "raw"},
    ("lora_unet_layers_0_attention_qkv", "lora_unet_layers_1_feed_forward_w3", "lora_unet_layers_1_adaLN_modulation_1",
     "lora_unet_noise_refiner_0_attention_out", "lora_unet_context_refiner_0_feed_forward_w1"),
    {"ss_base_model_version": "lumina2", "ss_network_module": "networks.lora_lumina",
     "modelspec.architecture": "lumina-2/lora", "ss_timestep_sampling": "shift", "ss_discrete_flow_shift": "6.0",
     "ss_model_prediction_type": "raw"})


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[shared.Plugin, shared.Runs]:
    return trained_runs(PLUGIN, tmp_path_factory)


def test_context_refiners_have_no_modulation_to_train(runs: tuple[shared.Plugin, shared.Runs]) -> None:
    _, run = runs
    assert not [k for k in run.lora if k.startswith("lora_unet_context_refiner_") and "adaLN" in k]


def test_validate_names_the_family_and_takes_both_layouts(runs: tuple[shared.Plugin, shared.Runs]) -> None:
    check_validate_names_the_family(runs)
