"""HunyuanImage 2.1 end to end on its tiny random-init model (trainer processes, hence slow): the checks every flow
plug-in passes (test_flow_plugins.py: a 2-step LoRA trains, samples and resumes exactly, its keys have ComfyUI's
names, Generate renders with it, a finetune saves a diffusers folder of the family, Validate names the family)."""
from __future__ import annotations

import pytest
import test_flow_plugins as shared
from plugin_runs import trained_runs
from test_flow_plugins import (  # noqa: F401 - the shared checks, collected here on this family's runs
    test_finetune_saves_a_diffusers_folder_of_the_family, test_generate_renders_with_and_without_the_lora,
    test_lora_trains_samples_and_names_its_modules_as_comfyui_does, test_resumed_lora_equals_the_uninterrupted_one,
    test_validate_names_the_family)

from trainers.models.hunyuan_image21.tiny import build_tiny_hunyuan_image21

pytestmark = pytest.mark.slow

PLUGIN = shared.Plugin(
    "hunyuan_image21", "HunyuanImage 2.1", build_tiny_hunyuan_image21, "HunyuanImagePipeline",
    {"timestep_sampling": "shift", "discrete_flow_shift": 5.0, "model_prediction_type": "raw",
     "weighting_scheme": "none"},
    ("lora_unet_double_blocks_0_img_attn_qkv", "lora_unet_double_blocks_0_img_mlp_0",
     "lora_unet_double_blocks_0_txt_mod_lin", "lora_unet_single_blocks_0_linear1",
     "lora_unet_single_blocks_0_modulation_lin"),
    {"ss_base_model_version": "hunyuan-image-2.1", "ss_network_module": "networks.lora_hunyuan_image",
     "modelspec.architecture": "hunyuan-image-2.1/lora", "ss_timestep_sampling": "shift",
     "ss_discrete_flow_shift": "5.0", "ss_model_prediction_type": "raw"})


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[shared.Plugin, shared.Runs]:
    return trained_runs(PLUGIN, tmp_path_factory)
