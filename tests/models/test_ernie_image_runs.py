"""ERNIE-Image end to end on its tiny random-init model (trainer processes, hence slow): the checks every flow plug-in
passes (test_flow_plugins.py: a 2-step LoRA trains, samples and resumes exactly, its keys are the modules trained,
Generate renders with it, a finetune saves a diffusers folder of the family, Validate names the family).
test_flow_plugins' diffusers check is left out (ErnieImagePipeline takes no max_sequence_length);
test_ernie_image.py loads the LoRA through its load_lora_weights in process instead."""
from __future__ import annotations

import pytest
import test_flow_plugins as shared
from plugin_runs import trained_runs
from test_flow_plugins import (  # noqa: F401 - the shared checks, collected here on this family's runs
    test_finetune_saves_a_diffusers_folder_of_the_family, test_generate_renders_with_and_without_the_lora,
    test_lora_trains_samples_and_names_its_modules_as_comfyui_does, test_resumed_lora_equals_the_uninterrupted_one,
    test_validate_names_the_family)

from trainers.models.ernie_image.tiny import build_tiny_ernie_image

pytestmark = pytest.mark.slow

PLUGIN = shared.Plugin(
    "ernie_image", "ERNIE-Image", build_tiny_ernie_image, "ErnieImagePipeline",
    {"timestep_sampling": "shift", "discrete_flow_shift": 3.0, "weighting_scheme": "none"},
    ("lora_unet_layers_0_self_attention_to_q", "lora_unet_layers_0_self_attention_to_out_0",
     "lora_unet_layers_1_mlp_gate_proj", "lora_unet_layers_1_mlp_linear_fc2"),
    {"ss_base_model_version": "ernie_image", "modelspec.architecture": "ernie-image/lora",
     "ss_timestep_sampling": "shift", "ss_discrete_flow_shift": "3.0"},
    saves_single_files=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[shared.Plugin, shared.Runs]:
    return trained_runs(PLUGIN, tmp_path_factory)
