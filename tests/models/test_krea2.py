"""Krea 2 as a one-folder flow plug-in, end to end on a tiny random-init model of its real diffusers classes: the
checks every flow plug-in passes (test_flow_plugins.py: LoRA trains, samples and resumes exactly, musubi-tuner's and
ComfyUI's key names, diffusers loads every key, round trip, Generate, finetune folder, Validate), and that training
feeds the transformer what Krea2Pipeline feeds it (its padded prompt layout, stacked layers, packing, positions)."""
from __future__ import annotations

import pytest
import test_flow_plugins as shared
import torch
from plugin_runs import trained_runs
from test_flow_plugins import (  # noqa: F401 - the shared checks, collected here on this family's runs
    test_diffusers_loads_every_key_and_renders_what_was_trained, test_finetune_saves_a_diffusers_folder_of_the_family,
    test_generate_renders_with_and_without_the_lora, test_lora_trains_samples_and_names_its_modules_as_comfyui_does,
    test_resumed_lora_equals_the_uninterrupted_one, test_validate_names_the_family)

from trainers.models import load_model
from trainers.models.krea2.tiny import build_tiny_krea2

pytestmark = pytest.mark.slow

PLUGIN = shared.Plugin(
    "krea2", "Krea 2", build_tiny_krea2, "Krea2Pipeline",
    {"timestep_sampling": "krea2_shift", "weighting_scheme": "none"},
    ("lora_unet_blocks_0_attn_wq", "lora_unet_blocks_1_attn_gate", "lora_unet_blocks_1_mlp_down", "lora_unet_first",
     "lora_unet_last_linear", "lora_unet_tmlp_0", "lora_unet_tproj_1", "lora_unet_txtmlp_3",
     "lora_unet_txtfusion_projector", "lora_unet_txtfusion_refiner_blocks_0_attn_wo"),
    {"ss_base_model_version": "krea2", "ss_network_module": "networks.lora_krea2",
     "modelspec.architecture": "Krea-2/lora", "ss_timestep_sampling": "krea2_shift"})


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[shared.Plugin, shared.Runs]:
    return trained_runs(PLUGIN, tmp_path_factory)


def test_training_encodes_prompts_and_calls_the_transformer_as_the_pipeline(
        runs: tuple[shared.Plugin, shared.Runs]) -> None:
    from diffusers import Krea2Pipeline

    from trainers.models.flow_latents import pack_latents

    _, run = runs
    model = load_model(str(run.model_dir), "auto", torch.float32)
    pipe = Krea2Pipeline.from_pretrained(run.model_dir)
    prompts = ["sks shape, a red circle {x}", "blurry"]
    hidden, mask = model.encode_texts(prompts, 1)
    embeds, embeds_mask = pipe.encode_prompt(prompts, device="cpu")
    assert torch.allclose(model.family.pipeline_embeds(hidden, mask)["prompt_embeds"], embeds[:1], atol=1e-5)
    assert torch.equal(mask.bool(), embeds_mask)

    noisy, t = torch.randn(1, 4, 8, 8), torch.tensor([700.0])
    with torch.no_grad():
        velocity = model.family.denoise(model.unet, noisy, t, hidden[:1], mask[:1], None)
        positions = pipe.prepare_position_ids(embeds.shape[1], 4, 4, "cpu")
        expected = pipe.transformer(hidden_states=pipe._pack_latents(noisy, 1, 4, 8, 8),
                                    encoder_hidden_states=embeds[:1], timestep=t / 1000, position_ids=positions,
                                    encoder_attention_mask=embeds_mask[:1], return_dict=False)[0]
    assert torch.allclose(pack_latents(velocity), expected, atol=1e-5)
