"""ERNIE-Image as a one-folder flow plug-in, in process on a tiny random-init model of its real diffusers classes
(ErnieImageTransformer2DModel, FLUX.2's AutoencoderKLFlux2 kind, a Mistral3Model text encoder): the folder is claimed
and other families' models refused by name before anything loads, Turbo is reported as a distilled base, captions
are encoded and the transformer called as ErnieImagePipeline does, and a LoRA file loads with every key through
ErnieImagePipeline.load_lora_weights and in ComfyUI (comfy_lora.py)."""
from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from family_checks import (check_ai_toolkit_files_load_whole, check_comfyui_loads_by_generic_names,
                           checkpointing_runs, check_wrong_family_refused, model_fixtures,
                           check_pipeline_loads_every_key, index_folder, option_values, saved_fixture)

from trainers.models.checks import model_issues
from trainers.models.distilled import distilled_base, distilled_notes
from trainers.models.ernie_image.rules import ERNIE_IMAGE
from trainers.models.ernie_image.tiny import build_tiny_ernie_image
from trainers.models.rules import folder_rules

CAPTIONS = ["a red cat on a mat", "a blue square"]


tiny, model = model_fixtures(build_tiny_ernie_image, "ernie")


_values = partial(option_values, network_train_unet_only=True)


def test_the_tiny_folder_is_claimed(tiny: Path) -> None:
    assert folder_rules(tiny).name == ERNIE_IMAGE.name
    index = json.loads((tiny / "model_index.json").read_text())
    assert index["_class_name"] == "ErnieImagePipeline" and index["text_encoder"][1] == "Mistral3Model"
    assert index["transformer"][1] == "ErnieImageTransformer2DModel" and index["vae"][1] == "AutoencoderKLFlux2"
    assert model_issues(_values(tiny)) == []


def test_a_folder_naming_its_transformer_class_is_claimed(tmp_path: Path) -> None:
    folder = index_folder(tmp_path, "renamed", {"_class_name": "SomeErniePipeline",
                                                "transformer": ["diffusers", "ErnieImageTransformer2DModel"]})
    assert folder_rules(folder).name == ERNIE_IMAGE.name


def test_a_wrong_family_model_is_refused_by_name_before_loading(tiny: Path, tmp_path: Path) -> None:
    check_wrong_family_refused(_values, tiny, tmp_path, "ernie_image", "ERNIE-Image", "flux")


def test_turbo_is_reported_as_a_distilled_base(tmp_path: Path) -> None:
    base = index_folder(tmp_path, "ERNIE-Image", {"_class_name": "ErnieImagePipeline"})
    turbo = index_folder(tmp_path / "models--baidu--ERNIE-Image-Turbo" / "snapshots", "0123",
                         {"_class_name": "ErnieImagePipeline"})
    assert distilled_base(_values(base)) is None
    found = distilled_base(_values(turbo))
    assert found.variant == "ERNIE-Image-Turbo" and found.adapter == "" and "baidu/ERNIE-Image" in found.without
    (note,) = distilled_notes(_values(turbo))  # what Validate and the run say
    assert "ERNIE-Image-Turbo is a distilled base" in note


def test_validate_names_the_family_in_what_it_refuses(tiny: Path) -> None:
    issues = model_issues(_values(tiny, min_snr_gamma=5.0, timestep_sampling="qwen_shift", text_encoder_lr=[1e-4]))
    assert sorted(i.field for i in issues) == ["min_snr_gamma", "text_encoder_lr", "timestep_sampling"]
    assert all("ERNIE-Image" in i.message for i in issues)


def test_captions_are_encoded_and_rendered_as_its_pipeline_does(model: object) -> None:
    family = model.family.configured({})
    hidden, mask = family.encode_prompts(model.text_encoders, family.tokenize(model.tokenizers, CAPTIONS), 1)
    assert hidden.shape[1] == 512 and mask.sum(dim=1).tolist() == [len(c) + 1 for c in CAPTIONS]  # + the BOS
    pipe = family.build_pipeline(model, family.inference_scheduler(model, "euler"))
    pipe.set_progress_bar_config(disable=True)
    theirs = pipe.encode_prompt(CAPTIONS, device="cpu")
    embeds = family.pipeline_embeds(hidden, mask)
    for ours, their in zip([*embeds["prompt_embeds"], *embeds["negative_prompt_embeds"]], theirs):
        assert ours.shape == their.shape and torch.allclose(ours, their, atol=1e-5)

    def image(**kwargs: object) -> torch.Tensor:
        return pipe(height=32, width=32, num_inference_steps=2, output_type="latent",
                    generator=torch.Generator().manual_seed(0), **family.pipeline_kwargs(4.0), **kwargs).images

    latents = image(**embeds)
    assert latents.shape == (1, 16, 8, 8) and torch.isfinite(latents).all()
    assert torch.allclose(latents, image(prompt=CAPTIONS[0], negative_prompt=CAPTIONS[1]), atol=1e-4)
    pixels = family.decode_latents(model.vae, latents, 32, 32)
    with torch.no_grad():
        decoded = pipe(height=32, width=32, num_inference_steps=2, guidance_scale=4.0, output_type="pt",
                       generator=torch.Generator().manual_seed(0), use_pe=False, **embeds).images
    assert pixels.shape == (1, 3, 32, 32) and torch.allclose((pixels / 2 + 0.5).clamp(0, 1), decoded, atol=1e-4)


@pytest.mark.parametrize("size", [(8, 8), (8, 12)])
def test_denoise_is_the_transformer_on_patchified_latents(model: object, size: tuple[int, int]) -> None:
    """The velocity: the transformer's output on the 2x2 patches of the autoencoder's grid, each caption with its own
    length (a shorter caption's padding masked), as its pipeline steps."""
    from diffusers import ErnieImagePipeline

    family = model.family.configured({})
    hidden, mask = family.encode_prompts(model.text_encoders, family.tokenize(model.tokenizers, CAPTIONS), 1)
    rows = family.pipeline_embeds(hidden, mask)
    noisy, timesteps = torch.randn(2, 4, *size), torch.tensor([700.0, 300.0])
    with torch.no_grad():
        ours = family.denoise(model.unet, noisy, timesteps, hidden, mask, None)
        text, lengths = ErnieImagePipeline._pad_text([*rows["prompt_embeds"], *rows["negative_prompt_embeds"]],
                                                     "cpu", torch.float32, model.unet.config.text_in_dim)
        theirs = model.unet(hidden_states=ErnieImagePipeline._patchify_latents(noisy), timestep=timesteps,
                            text_bth=text, text_lens=lengths, return_dict=False)[0]
    assert ours.shape == noisy.shape
    assert torch.allclose(ours, ErnieImagePipeline._unpatchify_latents(theirs), atol=1e-5)


def test_latents_are_normalised_per_patch_as_its_pipeline_undoes_it(model: object) -> None:
    """vae_latents' grid, patchified, is what the pipeline's decode un-normalises by the batch-norm statistics."""
    from diffusers import ErnieImagePipeline

    raw = torch.randn(1, 4, 8, 8)
    ours = ErnieImagePipeline._patchify_latents(model.family.vae_latents(raw, model.vae))
    bn = model.vae.bn
    undone = ours * torch.sqrt(bn.running_var.view(1, -1, 1, 1) + 1e-5) + bn.running_mean.view(1, -1, 1, 1)
    assert torch.allclose(ErnieImagePipeline._unpatchify_latents(undone), raw, atol=1e-5)


def test_one_step_on_the_flow_loss_lowers_it_with_or_without_checkpointing(tiny: Path) -> None:
    """The velocity loss (noise - latents) trains the blocks: gradients reach them, alike with gradient
    checkpointing, and a step against them lowers the loss."""
    grads, losses = [], []
    for loaded, family, (hidden, mask) in checkpointing_runs(tiny, CAPTIONS):
        torch.manual_seed(0)
        latents, noise = torch.randn(2, 4, 8, 8), torch.randn(2, 4, 8, 8)
        sigmas = torch.tensor([0.3, 0.8])

        def loss() -> torch.Tensor:
            noisy = (1 - sigmas.view(-1, 1, 1, 1)) * latents + sigmas.view(-1, 1, 1, 1) * noise
            out = family.denoise(loaded.unet, noisy, sigmas * 1000, hidden, mask, None)
            return (out - (noise - latents)).square().mean()

        before = loss()
        before.backward()
        grads.append(loaded.unet.layers[0].self_attention.to_q.weight.grad.clone())
        with torch.no_grad():
            for parameter in loaded.unet.parameters():
                if parameter.grad is not None:
                    parameter -= 0.05 * parameter.grad
            losses.append((float(before), float(loss())))
    assert grads[0].abs().max() > 0 and torch.allclose(grads[0], grads[1], atol=1e-6)
    assert all(after < first for first, after in losses)


saved = saved_fixture()


def test_its_lora_targets_the_blocks_attention_and_mlp(saved: SimpleNamespace) -> None:
    paths = {t.path for t in saved.targets}
    layers = ("self_attention.to_q", "self_attention.to_k", "self_attention.to_v", "self_attention.to_out.0",
              "mlp.gate_proj", "mlp.up_proj", "mlp.linear_fc2")
    assert paths == {f"layers.{i}.{name}" for i in range(2) for name in layers}
    assert all(key.startswith("diffusion_model.layers.") and ".lora_" in key for key in saved.file)
    assert not any(key.endswith(".alpha") for key in saved.file)  # folded into lora_A: diffusers reads no alpha
    assert saved.view.family.lora_in_own_names(saved.file).keys() == saved.state.keys()
    assert saved.view.family.lora_file_paths(saved.file.keys()) == {t.name: t.path for t in saved.targets}


def test_comfyui_loads_every_key_into_the_layer_that_was_trained(saved: SimpleNamespace) -> None:
    """ComfyUI's ERNIE-Image model (comfy/ldm/ernie) names its weights as diffusers does: its generic
    `diffusion_model.<path>` names address them."""
    check_comfyui_loads_by_generic_names(saved)


def test_diffusers_load_lora_weights_takes_every_key(model: object, saved: SimpleNamespace) -> None:
    """The saved file as it is: ErnieImagePipeline.load_lora_weights (ErnieImageLoraLoaderMixin) reads its
    `diffusion_model.` keys, and the transformer then computes what training's network does."""
    check_pipeline_loads_every_key(model, saved, CAPTIONS, (2, 4, 8, 8))


def test_ai_toolkits_files_load_whole_in_diffusers(model: object) -> None:
    """ai-toolkit's ERNIE-Image LoRAs: `diffusion_model.<path>` lora_A/lora_B without alphas, on any Linear of the
    transformer (its text projection too), read in the family's names and loaded by load_lora_weights whole."""
    check_ai_toolkit_files_load_whole(model, ("layers.1.mlp.up_proj", "text_proj"))
