"""FLUX.2 dev and klein as a one-folder flow plug-in, end to end on tiny random-init models of their real diffusers
classes: the checks every flow plug-in passes (test_flow_plugins.py: LoRA trains, samples and resumes exactly,
musubi-tuner's and ComfyUI's key names, diffusers loads every key, round trip, Generate, finetune folder, Validate),
and that training feeds the transformer what the pipelines feed it at inference (prompt encoding, latents, packing,
position ids). One trained run per variant serves every check."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest
import test_flow_plugins as shared
import torch
from test_flow_plugins import (  # noqa: F401 - the shared checks, collected here on this family's runs
    test_diffusers_loads_every_key_and_renders_what_was_trained, test_finetune_saves_a_diffusers_folder_of_the_family,
    test_generate_renders_with_and_without_the_lora, test_lora_trains_samples_and_names_its_modules_as_comfyui_does,
    test_resumed_lora_equals_the_uninterrupted_one, test_validate_names_the_family)

from trainers.models import load_model
from trainers.models.flux2.tiny import build_tiny_flux2, build_tiny_flux2_klein

pytestmark = pytest.mark.slow

OPTIONS = {"timestep_sampling": "flux2_shift", "weighting_scheme": "none", "guidance_scale": 1.0}
KEYS = ("lora_unet_double_blocks_0_img_attn_qkv", "lora_unet_double_blocks_0_txt_attn_proj",
        "lora_unet_double_blocks_0_img_mlp_0", "lora_unet_double_blocks_0_txt_mlp_2",
        "lora_unet_single_blocks_0_linear1", "lora_unet_single_blocks_1_linear2")
METADATA = {"ss_network_module": "networks.lora_flux_2", "ss_timestep_sampling": "flux2_shift",
            "ss_guidance_scale": "1.0", "modelspec.implementation": "https://github.com/black-forest-labs/flux2"}
VARIANTS = {
    "flux2-dev": shared.Plugin("flux2", "FLUX.2", build_tiny_flux2, "Flux2Pipeline", OPTIONS, KEYS,
                               {**METADATA, "ss_base_model_version": "flux_2_dev",
                                "modelspec.architecture": "Flux.2-dev/lora"}),
    "flux2-klein": shared.Plugin("flux2", "FLUX.2", build_tiny_flux2_klein, "Flux2KleinPipeline", OPTIONS, KEYS,
                                 {**METADATA, "ss_base_model_version": "flux_2_klein_4b",
                                  "modelspec.architecture": "Flux.2-klein-4b/lora"}),
}
shared.PLUGINS.update(VARIANTS)


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[shared.Plugin, shared.Runs]:
    return shared.runs.__wrapped__(request, tmp_path_factory)


def test_diffusers_reads_the_file_itself_with_every_key(runs: tuple[shared.Plugin, shared.Runs],
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """Flux2LoraLoaderMixin takes the kohya file as musubi-tuner writes it, leaving no key unused."""
    import diffusers

    plugin, run = runs
    pipe = getattr(diffusers, plugin.pipeline).from_pretrained(run.model_dir)
    with caplog.at_level(logging.WARNING):
        pipe.load_lora_weights(str(run.out / "straight.safetensors"))
    assert not [r for r in caplog.records if "nsupported" in r.getMessage() or "unexpected" in r.getMessage()]
    trained = {k.removesuffix(".lora_down.weight") for k in run.lora if k.endswith(".lora_down.weight")}
    loaded = [name for name, module in pipe.transformer.named_modules() if getattr(module, "lora_A", None)]
    # a double block's 8 modules are 12 layers in diffusers (q, k, v apart), each single block's 2 are 2
    assert len(trained) == 8 + 2 * 2 and len(loaded) == 12 + 2 * 2


def test_training_encodes_prompts_and_latents_as_the_pipeline(runs: tuple[shared.Plugin, shared.Runs]) -> None:
    import diffusers

    from trainers.models.flow_latents import pack_latents

    plugin, run = runs
    model = load_model(str(run.model_dir), "auto", torch.float32)
    pipe = getattr(diffusers, plugin.pipeline).from_pretrained(run.model_dir)
    prompts = ["sks shape, a red circle {x}", "blurry"]
    ours, _ = model.encode_texts(prompts, 1)
    theirs, text_ids = pipe.encode_prompt(prompts, device="cpu")
    assert torch.allclose(ours, theirs, atol=1e-5)

    pixels = torch.rand(1, 3, 64, 64) * 2 - 1
    raw = model.vae.encode(pixels).latent_dist.mode()
    latents = model.family.vae_latents(raw, model.vae)  # the grid training noises
    patches = pipe._encode_vae_image(pixels, None)  # what the pipeline feeds as a reference image
    assert torch.allclose(pack_latents(latents), pipe._pack_latents(patches), atol=1e-5)

    noisy, t = torch.randn_like(latents), torch.tensor([700.0])
    with torch.no_grad():
        velocity = model.family.configured({"guidance_scale": 2.0}).denoise(model.unet, noisy, t, ours[:1], None,
                                                                             None)
        guidance = torch.tensor([2.0]) if model.unet.config.guidance_embeds else None
        packed = pipe._patchify_latents(noisy)
        expected = pipe.transformer(hidden_states=pipe._pack_latents(packed), timestep=t / 1000, guidance=guidance,
                                    encoder_hidden_states=theirs[:1], txt_ids=text_ids[:1],
                                    img_ids=pipe._prepare_latent_ids(packed), return_dict=False)[0]
    assert torch.allclose(pack_latents(velocity), expected, atol=1e-5)


def test_klein_base_samples_with_true_cfg_and_dev_with_its_guidance_embedding(
        runs: tuple[shared.Plugin, shared.Runs], tmp_path: Path) -> None:
    plugin, run = runs
    model = load_model(str(run.model_dir), "auto", torch.float32)
    embeds = model.family.pipeline_embeds(*model.encode_texts(["sks shape", "blurry"], 1))
    klein = plugin.pipeline == "Flux2KleinPipeline"
    assert model.family.klein == klein and ("negative_prompt_embeds" in embeds) == klein
    assert model.unet.config.guidance_embeds != klein
