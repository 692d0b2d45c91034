"""HiDream-I1 as a one-folder flow plug-in, in process on a tiny random-init model of its real diffusers classes
(HiDreamImageTransformer2DModel with MoE blocks, FLUX.1's AutoencoderKL kind, CLIP-L and CLIP-G with projections,
T5, Llama): the folder is claimed and other families' models refused by name before anything loads, Dev and Fast
are told from Full by their scheduler configs (and reported as distilled bases), captions are encoded and the
transformer called as HiDreamImagePipeline does (its training-mode output included), and a LoRA file loads with
every key through HiDreamImagePipeline.load_lora_weights and in ComfyUI (comfy_lora.py)."""
from __future__ import annotations

import copy
import json
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from family_checks import (check_ai_toolkit_files_load_whole, check_comfyui_loads_by_generic_names,
                           checkpointing_runs, check_wrong_family_refused, model_fixtures,
                           check_pipeline_loads_every_key, option_values, saved_fixture)

from trainers.models import load_model
from trainers.models.checks import model_issues
from trainers.models.distilled import distilled_base, distilled_notes
from trainers.models.hidream.rules import HIDREAM
from trainers.models.hidream.tiny import build_tiny_hidream
from trainers.models.rules import folder_rules

CAPTIONS = ["a red cat on a mat", "a blue square"]


tiny, model = model_fixtures(build_tiny_hidream, "hidream")


_values = partial(option_values, network_train_unet_only=True)


def _folder(tmp_path: Path, name: str, pipeline: str, scheduler: dict[str, object] | None = None) -> Path:
    folder = tmp_path / name
    (folder / "scheduler").mkdir(parents=True)
    (folder / "model_index.json").write_text(json.dumps({"_class_name": pipeline}))
    if scheduler is not None:
        (folder / "scheduler" / "scheduler_config.json").write_text(json.dumps(scheduler))
    return folder


def test_the_tiny_folder_is_claimed(tiny: Path) -> None:
    assert folder_rules(tiny) is HIDREAM
    index = json.loads((tiny / "model_index.json").read_text())
    assert index["_class_name"] == "HiDreamImagePipeline" and index["text_encoder_4"][1] == "LlamaForCausalLM"
    assert model_issues(_values(tiny)) == []


def test_a_wrong_family_model_is_refused_by_name_before_loading(tiny: Path, tmp_path: Path) -> None:
    check_wrong_family_refused(_values, tiny, tmp_path, "hidream", "HiDream-I1", "flux")


def test_dev_and_fast_are_told_by_their_scheduler_and_reported_distilled(tmp_path: Path) -> None:
    full = _folder(tmp_path, "full", "HiDreamImagePipeline", {"_class_name": "UniPCMultistepScheduler",
                                                              "flow_shift": 3.0, "use_flow_sigmas": True})
    dev = _folder(tmp_path, "dev", "HiDreamImagePipeline", {"_class_name": "FlowMatchEulerDiscreteScheduler",
                                                            "shift": 6.0})
    fast = _folder(tmp_path, "fast", "HiDreamImagePipeline", {"_class_name": "FlowMatchEulerDiscreteScheduler",
                                                              "shift": 3.0})
    assert distilled_base(_values(full)) is None
    assert distilled_base(_values(dev)).variant == "HiDream-I1 Dev"
    found = distilled_base(_values(fast))
    assert found.variant == "HiDream-I1 Fast" and "scheduler" in found.told_by and "Full" in found.without
    (note,) = distilled_notes(_values(dev))  # what Validate and the run say
    assert "HiDream-I1 Dev is a distilled base" in note and "train on HiDream-I1 Full" in note


def test_validate_names_the_family_in_what_it_refuses(tiny: Path) -> None:
    issues = model_issues(_values(tiny, min_snr_gamma=5.0, save_model_as="safetensors", text_encoder_lr=[1e-4]))
    assert sorted(i.field for i in issues) == ["min_snr_gamma", "save_model_as", "text_encoder_lr"]
    assert all("HiDream-I1" in i.message for i in issues)


def test_a_lora_that_would_train_its_text_encoders_is_refused_by_name(tiny: Path) -> None:
    (issue,) = model_issues(_values(tiny, network_train_unet_only=False))
    assert issue.field == "network_train_unet_only" and "HiDream-I1" in issue.message and "CLIP-L" in issue.message


def test_a_folder_without_its_llama_says_where_to_get_it(tmp_path: Path) -> None:
    from trainers.models.rules import ModelLoadError

    folder = _folder(tmp_path, "no_llama", "HiDreamImagePipeline")
    with pytest.raises(ModelLoadError, match="text_encoder_4 and tokenizer_4.*Llama 3.1 Community License"):
        load_model(str(folder), "auto", torch.float32)


def test_non_square_sizes_above_its_token_budget_are_refused_by_name(tiny: Path) -> None:
    assert model_issues(_values(tiny, resolution="1024", enable_bucket=True)) == []
    assert model_issues(_values(tiny, resolution="1536")) == []  # square latents are not padded
    for values in ({"resolution": "1280", "enable_bucket": True}, {"resolution": "1280,1024"}):
        (issue,) = model_issues(_values(tiny, **values))
        assert issue.field == "resolution" and "HiDream-I1" in issue.message and "1024 x 1024" in issue.message


def test_its_single_files_are_recognised_and_refused_by_name(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    path = tmp_path / "hidream_i1_full.safetensors"
    save_file({"double_stream_blocks.0.block.ff_i.gate.weight": torch.zeros(4, 8),
               "single_stream_blocks.0.block.attn1.to_q.weight": torch.zeros(8, 8)}, str(path))
    (issue,) = model_issues(_values(path))
    assert issue.field == "pretrained_model_name_or_path"
    assert "HiDream-I1 single file" in issue.message and "HiDreamImagePipeline" in issue.message


def test_captions_are_encoded_and_rendered_as_its_pipeline_does(model: object) -> None:
    family = model.family.configured({})
    hidden, pooled = family.encode_prompts(model.text_encoders, family.tokenize(model.tokenizers, CAPTIONS), 1)
    pipe = family.build_pipeline(model, family.inference_scheduler(model, "euler"))
    pipe.set_progress_bar_config(disable=True)
    t5, _, llama, _, pooled_theirs, _ = pipe.encode_prompt(CAPTIONS, device="cpu", do_classifier_free_guidance=False)
    ours = family.split_states(hidden)
    assert torch.allclose(ours[0], t5, atol=1e-5) and torch.allclose(ours[1], llama, atol=1e-5)
    assert torch.allclose(pooled, pooled_theirs, atol=1e-5)
    assert llama.shape[0] == model.text_encoders[3].config.num_hidden_layers  # hidden_states[1:], every layer

    def image(**kwargs: object) -> torch.Tensor:
        return pipe(height=64, width=64, num_inference_steps=2, output_type="latent", guidance_scale=4.0,
                    generator=torch.Generator().manual_seed(0), **kwargs).images

    embeds = family.pipeline_embeds(hidden, pooled)
    latents = image(**embeds)
    assert latents.shape == (1, 16, 16, 16) and torch.isfinite(latents).all()
    assert torch.allclose(latents, image(prompt=CAPTIONS[0], negative_prompt=CAPTIONS[1]), atol=1e-4)
    pixels = family.decode_latents(model.vae, latents, 64, 64)
    assert pixels.shape == (1, 3, 64, 64)


@pytest.mark.parametrize("size", [(8, 8), (8, 12)])
def test_denoise_is_the_negated_transformer_output_in_both_modes(model: object, size: tuple[int, int]) -> None:
    """The velocity: the transformer's output negated, as its pipeline steps; in training mode (the MoE's other
    path, unpatchify's patches, non-square latents padded to max_resolution) the same as in eval mode."""
    family = model.family.configured({})
    hidden, pooled = family.encode_prompts(model.text_encoders, family.tokenize(model.tokenizers, CAPTIONS), 1)
    embeds = family.pipeline_embeds(hidden, pooled)
    noisy, timesteps = torch.randn(2, 16, *size), torch.tensor([700.0, 700.0])
    unet = copy.deepcopy(model.unet).eval()
    with torch.no_grad():
        ours = family.denoise(unet, noisy, timesteps, hidden, pooled, None)
        first = unet(hidden_states=noisy[:1], timesteps=timesteps[:1],
                     encoder_hidden_states_t5=embeds["prompt_embeds_t5"],
                     encoder_hidden_states_llama3=embeds["prompt_embeds_llama3"],
                     pooled_embeds=embeds["pooled_prompt_embeds"], return_dict=False)[0]
        unet.train()
        training = family.denoise(unet, noisy, timesteps, hidden, pooled, None)
    assert ours.shape == noisy.shape and torch.allclose(ours[:1], -first, atol=1e-5)
    assert torch.allclose(training, ours, atol=1e-5)


def test_gradient_checkpointing_trains_as_without_it(tiny: Path) -> None:
    grads = []
    for loaded, family, (hidden, pooled) in checkpointing_runs(tiny, CAPTIONS):
        torch.manual_seed(0)
        family.denoise(loaded.unet, torch.randn(2, 16, 8, 8), torch.tensor([300.0, 800.0]), hidden, pooled,
                       None).square().mean().backward()
        grads.append(loaded.unet.double_stream_blocks[0].block.attn1.to_q.weight.grad)
    assert grads[0].abs().max() > 0 and torch.allclose(grads[0], grads[1], atol=1e-6)


saved = saved_fixture()


def test_its_lora_targets_every_linear_layer_of_the_blocks(saved: SimpleNamespace) -> None:
    paths = {t.path for t in saved.targets}
    assert {"double_stream_blocks.0.block.attn1.to_q", "double_stream_blocks.0.block.attn1.to_out_t",
            "double_stream_blocks.0.block.ff_i.experts.3.w2", "double_stream_blocks.0.block.ff_i.shared_experts.w1",
            "double_stream_blocks.0.block.ff_t.w3", "double_stream_blocks.0.block.adaLN_modulation.1",
            "single_stream_blocks.0.block.attn1.to_v", "single_stream_blocks.0.block.ff_i.experts.0.w1"} <= paths
    assert not any(p.startswith(("caption_projection", "x_embedder", "final_layer")) for p in paths)
    assert all(key.startswith("diffusion_model.") and ".lora_" in key for key in saved.file)
    assert saved.view.family.lora_in_own_names(saved.file).keys() == saved.state.keys()
    assert saved.view.family.lora_file_paths(saved.file.keys()) == {t.name: t.path for t in saved.targets}


def test_comfyui_loads_every_key_into_the_layer_that_was_trained(saved: SimpleNamespace) -> None:
    """ComfyUI's HiDream model holds the published (diffusers-named) weights: its generic `diffusion_model.<path>`
    names (and its HiDream branch's `transformer.<path>`) address them."""
    check_comfyui_loads_by_generic_names(saved)


def test_diffusers_load_lora_weights_takes_every_key(model: object, saved: SimpleNamespace) -> None:
    """HiDreamImagePipeline's HiDream conversion reads the `diffusion_model.` keys."""
    check_pipeline_loads_every_key(model, saved, CAPTIONS, (2, 16, 8, 8))


def test_ai_toolkits_files_load_whole_in_diffusers(model: object) -> None:
    """ai-toolkit's HiDream LoRAs: `diffusion_model.<path>` lora_A/lora_B without alphas, on any Linear of the
    transformer (a caption projection too), read in the family's names and loaded by load_lora_weights with every
    key."""
    check_ai_toolkit_files_load_whole(model, ("double_stream_blocks.0.block.attn1.to_q", "caption_projection.0.linear"))


def test_a_dev_folder_loads_as_dev_and_samples_without_cfg(tmp_path: Path) -> None:
    loaded = load_model(str(build_tiny_hidream(tmp_path / "dev", variant="dev")), "auto", torch.float32)
    family = loaded.family.configured({})
    assert family.variant == "dev" and family.pipeline_kwargs(4.0) == {"guidance_scale": 0.0}
    assert loaded.noise_scheduler.config.shift == 6.0 and family.scheduler_config() == {"shift": 6.0}
    assert load_model(str(tmp_path / "dev"), "auto", torch.float32).family.title == "HiDream-I1"
