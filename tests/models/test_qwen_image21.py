"""Qwen-Image 2.1 as a one-folder flow plug-in (a Qwen-Image variant), end to end on a tiny random-init model of its
real diffusers classes: the checks every flow plug-in passes (test_flow_plugins.py: LoRA trains, samples and resumes
exactly, key names, Generate, finetune folder, Validate) on its runs, and diffusers' QwenImage21Pipeline loading every
key of its LoRA (built from the loaded model: its Qwen3VLProcessor would need torchvision)."""
from __future__ import annotations

import pytest
import test_flow_plugins as shared
import torch
from plugin_runs import trained_runs
from test_flow_plugins import (  # noqa: F401 - the shared checks, collected here on this family's runs
    test_finetune_saves_a_diffusers_folder_of_the_family, test_generate_renders_with_and_without_the_lora,
    test_lora_trains_samples_and_names_its_modules_as_comfyui_does, test_resumed_lora_equals_the_uninterrupted_one,
    test_validate_names_the_family)

from trainers.models import load_model
from trainers.models.qwen_image21.tiny import build_tiny_qwen_image21

pytestmark = pytest.mark.slow

PLUGIN = shared.Plugin(
    "qwen_image21", "Qwen-Image 2.1", build_tiny_qwen_image21, "QwenImage21Pipeline",
    {"timestep_sampling": "qwen_shift", "weighting_scheme": "none"},
    ("lora_unet_transformer_blocks_0_attn_to_q", "lora_unet_transformer_blocks_0_attn_to_out_0",
     "lora_unet_transformer_blocks_1_img_mlp_gate_layer", "lora_unet_transformer_blocks_1_img_mlp_out"),
    {"ss_base_model_version": "qwen_image_21", "ss_network_module": "networks.lora_qwen_image",
     "modelspec.architecture": "Qwen-Image-2.1/lora", "ss_timestep_sampling": "qwen_shift"})


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[shared.Plugin, shared.Runs]:
    return trained_runs(PLUGIN, tmp_path_factory)


def test_its_pipeline_loads_every_key_and_renders_what_was_trained(runs: tuple[shared.Plugin, shared.Runs]) -> None:
    from trainers.methods.lora.network import LoRANetwork

    _, run = runs
    model = load_model(str(run.model_dir), "auto", torch.float32)
    converted = model.family.lora_for_pipeline(run.lora, model)
    pipe = model.family.build_pipeline(model, model.family.inference_scheduler(model, "euler"))
    base = _image(pipe)
    pipe.load_lora_weights(converted)
    loaded = {name for name, module in pipe.transformer.named_modules() if hasattr(module, "lora_A") and module.lora_A}
    assert loaded == {k.removeprefix("transformer.").removesuffix(".lora_A.weight") for k in converted
                      if k.endswith("lora_A.weight")}
    assert {name.rsplit(".", 1)[-1] for name in loaded} >= {"to_q", "to_k", "to_v", "proj", "gate_layer", "out"}
    with_lora = _image(pipe)
    assert (with_lora - base).abs().max() > 1e-4
    ours = load_model(str(run.model_dir), "auto", torch.float32)  # the LoRA network as training ran it
    network = LoRANetwork(ours.unet, [], unet_key_style="own", network_dim=1, network_alpha=1,
                          train_text_encoder=False, modules_dim=LoRANetwork.modules_dim_from_state_dict(run.lora),
                          unet_targets=ours.family.lora_targets(ours.unet))
    network.load_kohya_state_dict(run.lora)
    assert shared._same(network.kohya_state_dict(torch.float32), run.lora)  # save -> load -> save is identical
    network.apply_to()
    ours_pipe = ours.family.build_pipeline(ours, ours.family.inference_scheduler(ours, "euler"))
    assert torch.allclose(_image(ours_pipe), with_lora, atol=1e-5)


def test_the_pipeline_encodes_captions_as_training_does(runs: tuple[shared.Plugin, shared.Runs]) -> None:
    from trainers.models.qwen_image.family import trimmed

    _, run = runs
    model = load_model(str(run.model_dir), "auto", torch.float32)
    captions = ["sks shape, red circle", "a blue square"]
    hidden, mask = trimmed(*model.family.encode_prompts(model.text_encoders,
                                                        model.family.tokenize(model.tokenizers, captions), 1))
    pipe = model.family.build_pipeline(model, model.noise_scheduler)
    expected, expected_mask, _ = pipe.encode_prompt(captions, device="cpu")
    assert torch.allclose(hidden, expected, atol=1e-5) and torch.equal(mask.bool(), expected_mask.bool())


def _image(pipe: object) -> torch.Tensor:
    return pipe("sks shape, red circle", num_inference_steps=2, height=64, width=64, output_type="pt",  # type: ignore
                generator=torch.Generator().manual_seed(0)).images
