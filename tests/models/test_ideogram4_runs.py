"""Ideogram 4 end to end on its tiny random-init model (trainer processes, hence slow): the checks every flow plug-in
passes (test_flow_plugins.py: a 2-step LoRA trains, samples and resumes exactly, its keys are the modules trained,
Generate renders with it, a finetune saves a diffusers folder of the family, Validate names the family).
test_flow_plugins' diffusers check is left out: it renders through the pipeline's from_pretrained, whose unconditional
branch is the published unconditional transformer (our samples' is the trained one, as musubi-tuner's LoRA
samples); test_ideogram4.py loads the LoRA through Ideogram4Pipeline.load_lora_weights in process instead."""
from __future__ import annotations

import pytest
import test_flow_plugins as shared
from plugin_runs import trained_runs
from test_flow_plugins import (  # noqa: F401 - the shared checks, collected here on this family's runs
    test_finetune_saves_a_diffusers_folder_of_the_family, test_generate_renders_with_and_without_the_lora,
    test_lora_trains_samples_and_names_its_modules_as_comfyui_does, test_resumed_lora_equals_the_uninterrupted_one,
    test_validate_names_the_family)

from trainers.models.ideogram4.tiny import build_tiny_ideogram4

pytestmark = pytest.mark.slow

PLUGIN = shared.Plugin(
    "ideogram4", "Ideogram 4", build_tiny_ideogram4, "Ideogram4Pipeline",
    {"timestep_sampling": "ideogram4_shift", "weighting_scheme": "none", "network_train_unet_only": True},
    ("lora_unet_layers_0_attention_qkv", "lora_unet_layers_0_attention_o", "lora_unet_layers_1_feed_forward_w1",
     "lora_unet_layers_1_feed_forward_w2", "lora_unet_layers_1_feed_forward_w3"),
    {"ss_base_model_version": "ideogram4", "modelspec.architecture": "Ideogram-4/lora",
     "ss_network_module": "networks.lora_ideogram4", "ss_timestep_sampling": "ideogram4_shift"},
    saves_single_files=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[shared.Plugin, shared.Runs]:
    return trained_runs(PLUGIN, tmp_path_factory)
