"""Ideogram 4 as a one-folder flow plug-in, in process on a tiny random-init model of its real diffusers classes
(Ideogram4Transformer2DModel as the conditional and unconditional transformer, a 36-layer Qwen3VLModel, FLUX.2's
32-channel AutoencoderKLFlux2): the folder is claimed and other families' models refused by name before anything
loads, captions are encoded and the transformer called as Ideogram4Pipeline does, its timestep sampling is
musubi-tuner's, and a LoRA file loads with every key through Ideogram4Pipeline.load_lora_weights and in ComfyUI."""
from __future__ import annotations

import copy
import json
import math
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from family_checks import (check_adapter_updates, check_network_denoises_as, checkpointing_runs,
                           check_wrong_family_refused, model_fixtures, index_folder, option_values, saved_fixture)

from trainers.models.checks import model_issues
from trainers.models.ideogram4.rules import IDEOGRAM4
from trainers.models.ideogram4.sequence import patchify, unpatchify
from trainers.models.ideogram4.tiny import build_tiny_ideogram4
from trainers.models.rules import folder_rules

CAPTIONS = ["a red cat on a mat", "a blue square"]


tiny, model = model_fixtures(build_tiny_ideogram4, "ideogram4")


_values = partial(option_values, network_train_unet_only=True)


def test_the_tiny_folder_is_claimed(tiny: Path, tmp_path: Path) -> None:
    assert folder_rules(tiny) is IDEOGRAM4
    index = json.loads((tiny / "model_index.json").read_text())
    assert index["_class_name"] == "Ideogram4Pipeline" and index["text_encoder"][1] == "Qwen3VLModel"
    assert index["vae"][1] == "AutoencoderKLFlux2" and index["unconditional_transformer"][1] == index["transformer"][1]
    assert model_issues(_values(tiny)) == []
    # a folder of another pipeline class whose transformer is Ideogram 4's
    other = index_folder(tmp_path, "renamed", {"_class_name": "SomePipeline",
                                               "transformer": ["diffusers", "Ideogram4Transformer2DModel"]})
    assert folder_rules(other) is IDEOGRAM4


def test_a_wrong_family_model_is_refused_by_name_before_loading(tiny: Path, tmp_path: Path) -> None:
    check_wrong_family_refused(_values, tiny, tmp_path, "ideogram4", "Ideogram 4", "flux2")


def test_validate_names_the_family_in_what_it_refuses(tiny: Path) -> None:
    issues = model_issues(_values(tiny, min_snr_gamma=5.0, text_encoder_lr=[1e-4], timestep_sampling="qwen_shift"))
    assert sorted(i.field for i in issues) == ["min_snr_gamma", "text_encoder_lr", "timestep_sampling"]
    assert all("Ideogram 4" in i.message for i in issues)
    assert model_issues(_values(tiny, timestep_sampling="ideogram4_shift")) == []


def test_captions_are_encoded_as_its_pipeline_does(model: object, tiny: Path) -> None:
    from diffusers import Ideogram4Pipeline

    family = model.family.configured({})
    hidden, mask = family.encode_prompts(model.text_encoders, family.tokenize(model.tokenizers, CAPTIONS), 1)
    pipe = Ideogram4Pipeline.from_pretrained(tiny)
    theirs, _, _, indicator = pipe.encode_prompt(CAPTIONS, 2, 2, 512, "cpu")
    assert hidden.shape == (2, 512, 13 * 16) and torch.equal(mask.bool(), indicator[:, :512] == 3)
    assert torch.allclose(hidden, theirs[:, :512], atol=1e-5)


def test_denoise_is_the_negated_transformer_output_on_the_pipelines_sequence(model: object, tiny: Path) -> None:
    """The velocity: the pipeline's packed [padding][text][image] sequence at model time 1 - sigma, its image tokens'
    output negated; trimming the padding every caption has changes nothing."""
    from diffusers import Ideogram4Pipeline

    family = model.family.configured({})
    hidden, mask = family.encode_prompts(model.text_encoders, family.tokenize(model.tokenizers, CAPTIONS), 1)
    pipe = Ideogram4Pipeline.from_pretrained(tiny)
    features, positions, segments, indicator = pipe.encode_prompt(CAPTIONS, 4, 6, 512, "cpu")
    noisy, timesteps = torch.randn(2, 32, 8, 12), torch.tensor([300.0, 800.0])
    with torch.no_grad():
        ours = family.denoise(model.unet, noisy, timesteps, hidden, mask, None)
        sequence = torch.cat([torch.zeros(2, 512, 128), patchify(noisy)], dim=1)
        out = model.unet(hidden_states=sequence, timestep=1 - timesteps / 1000, encoder_hidden_states=features,
                         position_ids=positions, segment_ids=segments, indicator=indicator, return_dict=False)[0]
    assert torch.allclose(ours, -unpatchify(out[:, 512:], 8, 12), atol=1e-5)


def test_latents_are_its_normalised_patches(model: object) -> None:
    """vae_latents: the 2x2 patches normalised by the autoencoder's batch-norm statistics (as the pipeline
    denormalises its tokens before decoding), kept on the VAE's grid."""
    raw = torch.randn(1, 32, 8, 8)
    latents = model.family.vae_latents(raw, model.vae)
    bn = model.vae.bn
    tokens = (patchify(raw) - bn.running_mean) / torch.sqrt(bn.running_var + model.vae.config.batch_norm_eps)
    assert latents.shape == raw.shape and torch.allclose(patchify(latents), tokens, atol=1e-6)


def test_ideogram4_shift_is_musubi_tuners() -> None:
    """compute_ideogram4_shift_timestep: sigmoid(mu + 1.5 z), mu = 0.5 log(pixels / 512^2), clamped to the
    pipeline's log-SNR range; a larger image draws noisier."""
    from trainers.models.ideogram4.family import IDEOGRAM4 as FAMILY

    family = FAMILY.configured({"timestep_sampling": "ideogram4_shift"})
    u = torch.tensor([1e-9, 0.1, 0.5, 0.9, 1 - 1e-9], dtype=torch.float64)
    z = torch.special.ndtri(u.clamp(1e-7, 1 - 1e-7))
    at_512 = family.draw_sigmas(z, u, (64, 64), None, None)
    expected = torch.sigmoid(1.5 * z).clamp(1 - 1 / (1 + math.exp(-7.5)), 1 - 1 / (1 + math.exp(9)))
    assert torch.allclose(at_512, expected)
    at_1024 = family.draw_sigmas(z, u, (128, 128), None, None)
    assert torch.allclose(at_1024[2], torch.sigmoid(torch.tensor(0.5 * math.log(4.0), dtype=torch.float64)))
    assert (at_1024[1:4] > at_512[1:4]).all()


def test_one_training_step_lowers_nothing_to_nan_and_reaches_every_block(tiny: Path) -> None:
    """One step of the flow objective in training mode (gradient checkpointing on): a finite loss and gradients in
    every block's attention and feed-forward, the same as without checkpointing."""
    grads = []
    for loaded, family, (hidden, mask) in checkpointing_runs(tiny, CAPTIONS):
        torch.manual_seed(0)
        latents, noise = torch.randn(2, 32, 8, 8), torch.randn(2, 32, 8, 8)
        sigmas = torch.tensor([0.3, 0.8]).view(-1, 1, 1, 1)
        noisy = (1 - sigmas) * latents + sigmas * noise
        pred = family.denoise(loaded.unet, noisy, sigmas.flatten() * 1000, hidden, mask, None)
        loss = torch.nn.functional.mse_loss(pred, noise - latents)
        loss.backward()
        assert torch.isfinite(loss)
        blocks = loaded.unet.layers
        assert all(b.attention.to_q.weight.grad.abs().max() > 0 and b.feed_forward.w2.weight.grad.abs().max() > 0
                   for b in blocks)
        grads.append(blocks[0].attention.to_q.weight.grad)
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_a_sample_renders_through_its_pipeline(model: object) -> None:
    """Samples: Ideogram4Pipeline's loop with the family's encoded prompts; the unconditional branch the trained
    transformer reading the negative prompt (musubi-tuner's LoRA sampling)."""
    family = model.family.configured({})
    hidden, mask = family.encode_prompts(model.text_encoders, family.tokenize(model.tokenizers, CAPTIONS), 1)
    pipe = family.build_pipeline(model, family.inference_scheduler(model, "euler"))
    pipe.set_progress_bar_config(disable=True)

    def image(cfg: float) -> torch.Tensor:
        return pipe(**family.pipeline_embeds(hidden, mask), height=64, width=96, num_inference_steps=2,
                    output_type="latent", generator=torch.Generator().manual_seed(0),
                    **family.pipeline_kwargs(cfg)).images

    latents = image(4.0)
    assert latents.shape == (1, 16 * 24, 128) and torch.isfinite(latents).all()  # the tiny VAE halves: 4 px a token
    assert not torch.allclose(latents, image(1.0))  # the negative prompt's branch counts
    pixels = family.decode_latents(model.vae, latents, 96, 64)
    assert pixels.shape == (1, 3, 64, 96)


saved = saved_fixture()


def test_its_lora_is_musubi_tuners_modules_under_reference_names(saved: SimpleNamespace) -> None:
    names = {t.name for t in saved.targets}
    assert {"lora_unet_layers_0_attention_qkv", "lora_unet_layers_1_attention_o", "lora_unet_layers_0_feed_forward_w1",
            "lora_unet_layers_1_feed_forward_w3"} <= names and len(names) == 2 * 5
    assert not any("adaln" in name for name in names)
    assert "diffusion_model.layers.0.attention.qkv.lora_down.weight" in saved.file
    assert all(key.startswith("diffusion_model.layers.") for key in saved.file)
    assert saved.view.family.lora_in_own_names(saved.file).keys() == saved.state.keys()
    assert saved.view.family.lora_in_own_names(saved.state) is saved.state  # musubi-tuner's files, as they are
    assert saved.view.family.lora_file_paths(saved.file.keys()) == {t.name: t.path for t in saved.targets}


def _reference_shapes(unet: torch.nn.Module) -> dict[str, torch.Size]:
    """The transformer's weights under Comfy-Org's reference names (musubi-tuner's Ideogram4Transformer: q, k and v
    one attention.qkv, to_out.0 as attention.o), as ComfyUI's model holds them."""
    shapes: dict[str, torch.Size] = {}
    for key, value in unet.state_dict().items():
        if ".attention.to_k." in key or ".attention.to_v." in key:
            continue
        if ".attention.to_q." in key:
            key, value = key.replace(".to_q.", ".qkv."), torch.empty(3 * value.shape[0], value.shape[1])
        shapes["diffusion_model." + key.replace(".attention.to_out.0.", ".attention.o.")] = value.shape
    return shapes


def test_comfyui_loads_every_key_into_the_layer_that_was_trained(saved: SimpleNamespace) -> None:
    from comfy_lora import PREFIX, check_patches, load_lora, unet_key_map

    shapes = _reference_shapes(saved.unet)
    patches, not_loaded = load_lora(saved.file, unet_key_map(shapes))
    assert not_loaded == []  # ComfyUI warns "lora key not loaded" for each of these
    assert len(patches) == len(saved.targets)
    check_patches(patches, shapes)
    for i in range(len(saved.unet.layers)):
        block = f"layers.{i}.attention."
        qkv = torch.cat([saved.updates[block + p] for p in ("to_q", "to_k", "to_v")])
        assert torch.allclose(patches[f"{PREFIX}{block}qkv.weight"], qkv, atol=1e-5)
        assert torch.allclose(patches[f"{PREFIX}{block}o.weight"], saved.updates[block + "to_out.0"], atol=1e-5)
        for w in ("w1", "w2", "w3"):
            path = f"layers.{i}.feed_forward.{w}"
            assert torch.allclose(patches[f"{PREFIX}{path}.weight"], saved.updates[path], atol=1e-5)


def test_diffusers_load_lora_weights_takes_every_key(model: object, saved: SimpleNamespace) -> None:
    """Ideogram4Pipeline.load_lora_weights (its conversion of `diffusion_model.` kohya files: qkv split, alpha
    folded in) loads the file into the layers trained, and the transformer then computes what training's does."""
    from diffusers import Ideogram4Pipeline

    family = model.family.configured({})
    unet = copy.deepcopy(model.unet).eval()
    pipe = Ideogram4Pipeline(scheduler=model.noise_scheduler, vae=model.vae, text_encoder=model.text_encoders[0],
                             tokenizer=model.tokenizers[0], transformer=unet, unconditional_transformer=unet)
    state = pipe.lora_state_dict(dict(saved.file))
    assert len(state) == 2 * len(saved.targets) + 2 * 2 * len(unet.layers)  # qkv is three modules in diffusers
    pipe.load_lora_weights(dict(saved.file), adapter_name="default_0")
    check_adapter_updates(unet, saved.updates)
    hidden, mask = family.encode_prompts(model.text_encoders, family.tokenize(model.tokenizers, CAPTIONS), 1)
    # the network as training runs it (on the fixture's copy) computes what diffusers does
    check_network_denoises_as(family, unet, saved, torch.randn(2, 32, 8, 8), hidden, mask)


def test_the_lora_renders_in_our_pipeline_as_diffusers_names_it(model: object, saved: SimpleNamespace) -> None:
    """lora_for_pipeline: the file as the layer's load_lora_weights takes it (diffusers' own module names)."""
    converted = model.family.lora_for_pipeline(model.family.lora_in_own_names(saved.file), saved.view)
    assert {k.removeprefix("transformer.").rsplit(".lora_", 1)[0] for k in converted} == saved.updates.keys()


def test_the_published_layout_gives_its_memory_facts() -> None:
    """arch/transformer.json (the published layout: diffusers' class defaults) counted on the meta device: the
    memory facts' parameters, and musubi-tuner's LoRA targets' parameters per rank."""
    from accelerate import init_empty_weights
    from diffusers import Ideogram4Transformer2DModel

    from trainers.models.ideogram4.family import IDEOGRAM4 as FAMILY

    config = json.loads((FAMILY.arch_dir / "transformer.json").read_text())
    with init_empty_weights():
        unet = Ideogram4Transformer2DModel.from_config(config)
    facts = FAMILY.memory_facts
    assert sum(p.numel() for p in unet.parameters()) == facts.denoiser and facts.swap_units == len(unet.layers)
    per_rank = sum(sum(layer.in_features for layer in t.layers[:1]) + sum(layer.out_features for layer in t.layers)
                   for t in FAMILY.lora_targets(unet))
    assert per_rank == facts.lora_per_rank


def test_a_saved_folder_keeps_the_unconditional_transformer_and_loads_in_diffusers(model: object,
                                                                                 tmp_path: Path) -> None:
    """A finetune's diffusers folder: the trained (conditional) transformer, FLUX.2's autoencoder class, and the
    loaded folder's unconditional transformer as it was, so that Ideogram4Pipeline.from_pretrained loads it."""
    from diffusers import Ideogram4Pipeline

    from trainers.models.single_file.save import save_diffusers_folder

    folder = save_diffusers_folder(model, tmp_path / "saved", torch.float32)
    index = json.loads((folder / "model_index.json").read_text())
    assert index["vae"] == ["diffusers", "AutoencoderKLFlux2"]
    assert index["unconditional_transformer"] == ["diffusers", "Ideogram4Transformer2DModel"]
    pipe = Ideogram4Pipeline.from_pretrained(folder)
    source = Ideogram4Pipeline.from_pretrained(model.source).unconditional_transformer.state_dict()
    assert all(torch.equal(v, source[k]) for k, v in pipe.unconditional_transformer.state_dict().items())
    assert folder_rules(folder) is IDEOGRAM4


def test_a_caption_longer_than_its_tokens_is_cut_before_the_generation_prompt(model: object) -> None:
    from trainers.data.prompt_chunks import PromptTruncated

    family = model.family.configured({})
    long = "a " + "very " * 300 + "long caption"  # one token a character in the tiny tokenizer
    with pytest.warns(PromptTruncated, match="Qwen3-VL tokens and is cut there"):
        (ids,) = family.tokenize(model.tokenizers, [long, CAPTIONS[0]])
    assert family.overlong(model.tokenizers, [long, CAPTIONS[0]], None) == [long]
    tokenizer = model.tokenizers[0]
    tail = tokenizer("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False).input_ids
    assert ids.shape == (2, 512) and ids[0, -len(tail):].tolist() == tail and ids[0, 0] != tokenizer.pad_token_id
