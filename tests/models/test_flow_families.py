"""The SD3 and FLUX families: detection, loading, option checks, text encoding, latent packing, LoRA module tables."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from trainers.core.options import BY_NAME
from trainers.models import ModelFiles, ModelLoadError, detect_family, family, load_model
from trainers.models.flow import clip_attention_mask
from trainers.models.flux.family import image_ids, joint_attention_mask, pack_latents, unpack_latents
from trainers.models.single_file import detect_checkpoint_family


def _defaults(**values: object) -> dict[str, object]:
    return {**{name: option.default for name, option in BY_NAME.items()}, **values}


def test_each_family_is_detected_from_its_folder(tiny_sd3_dir: Path, tiny_flux_dir: Path) -> None:
    assert detect_family(tiny_sd3_dir).name == "sd3"
    assert detect_family(tiny_flux_dir).name == "flux"
    sd3 = load_model(str(tiny_sd3_dir), "auto", torch.float32)
    flux = load_model(str(tiny_flux_dir), "auto", torch.float32)
    assert type(sd3.unet).__name__ == "SD3Transformer2DModel" and len(sd3.text_encoders) == 3
    assert type(flux.unet).__name__ == "FluxTransformer2DModel" and len(flux.text_encoders) == 2
    assert sd3.family.base_model_version == "5-medium" and sd3.family.title == "SD3.5"
    assert flux.family.modelspec_architecture == "flux-1-dev" and flux.family.t5_length == 512
    assert sd3.prediction_type == flux.prediction_type == "flow"
    with pytest.raises(ModelLoadError, match="looks like a model of the FLUX"):
        load_model(str(tiny_flux_dir), "sd3", torch.float32)


def test_flux_schnell_has_no_guidance_and_shorter_t5(tmp_path: Path) -> None:
    from trainers.models.flux.tiny import build_tiny_flux

    schnell = load_model(str(build_tiny_flux(tmp_path / "schnell", guidance_embeds=False)), "auto", torch.float32)
    assert schnell.family.modelspec_architecture == "flux-1-schnell" and schnell.family.t5_length == 256


@pytest.mark.parametrize(("keys", "family_name", "missing"), [
    (["double_blocks.0.img_attn.qkv.weight", "single_blocks.0.linear1.weight"], "flux", "FLUX.1 transformer has no "
     "img_in.weight"),
    (["model.diffusion_model.double_blocks.0.img_attn.qkv.weight"], "flux", "FLUX.1 transformer has no img_in.weight"),
    (["model.diffusion_model.joint_blocks.0.x_block.attn.qkv.weight"], "sd3", "SD3 MMDiT has no x_embedder.proj"),
])
def test_flow_family_files_are_told_apart_and_an_incomplete_one_is_named(tmp_path: Path, keys: list[str],
                                                                         family_name: str, missing: str) -> None:
    """(tests/models/test_flow_files.py loads complete ones.)"""
    path = tmp_path / "model.safetensors"
    save_file({k: torch.zeros(2, 2) for k in keys}, str(path))
    assert detect_checkpoint_family({k: (2, 2) for k in keys}, str(path)) == family_name
    files = {o: str(path) for o in ("clip_l", "clip_g", "t5xxl", "ae")}
    with pytest.raises(ModelLoadError, match=f"model.safetensors: the {missing}"):
        load_model(str(path), "auto", torch.float32, vae_path=str(tmp_path), files=ModelFiles.from_values(files))


def test_options_are_checked_against_the_family() -> None:
    sd1, sd3, flux = family("sd1"), family("sd3"), family("flux")
    assert [i.field for i in sd1.option_issues(_defaults(timestep_sampling="shift"))] == ["timestep_sampling"]
    assert sd1.option_issues(_defaults()) == [] and sd3.option_issues(_defaults()) == []
    assert flux.option_issues(_defaults()) == []
    assert [i.field for i in sd3.option_issues(_defaults(guidance_scale=1.0))] == ["guidance_scale"]
    assert [i.field for i in flux.option_issues(_defaults(training_shift=3.0))] == ["training_shift"]
    refused = _defaults(min_snr_gamma=5.0, v_parameterization=True, clip_skip=2, noise_offset=0.05,
                        network_module="lycoris.kohya", down_lr_weight="1,1", weighted_captions=True)
    names = {i.field for i in flux.option_issues(refused)}
    assert names == {"min_snr_gamma", "v_parameterization", "clip_skip", "noise_offset", "network_module",
                     "down_lr_weight", "weighted_captions"}
    assert {i.field for i in flux.option_issues(_defaults(min_timestep=100))} == {"min_timestep"}
    sizes = _defaults(resolution="520,512", enable_bucket=True, bucket_reso_steps=24)
    assert {i.field for i in flux.option_issues(sizes)} == {"resolution", "bucket_reso_steps"}
    assert sd1.option_issues(sizes) == []
    assert sd3.option_issues(_defaults(min_timestep=100)) == []
    assert {i.field for i in sd3.option_issues(_defaults(ip_noise_gamma=0.1))} == {"ip_noise_gamma"}
    assert {i.field for i in sd3.option_issues(_defaults(loss_type="huber"))} == {"huber_schedule"}
    assert sd3.option_issues(_defaults(loss_type="huber", huber_schedule="constant")) == []


def test_model_checks_run_before_weights_load(tiny_flux_dir: Path) -> None:
    from trainers.models.checks import model_issues

    issues = model_issues({**_defaults(min_snr_gamma=5.0), "pretrained_model_name_or_path": str(tiny_flux_dir)})
    assert [i.field for i in issues] == ["min_snr_gamma"]


def test_flux_tokens_and_text_encoding(tiny_flux_dir: Path) -> None:
    model = load_model(str(tiny_flux_dir), "auto", torch.float32)
    clip_ids, t5_ids = model.tokenize(["a red circle", "sks"])
    assert clip_ids.shape == (2, 77) and t5_ids.shape == (2, 512)
    hidden, pooled = model.encode_texts(["a red circle", "sks"], 1)
    assert hidden.shape == (2, 512, 32) and pooled.shape == (2, 32)
    assert (hidden[:, -1].abs().sum(dim=-1) > 0).all()  # padding has states without the mask
    masked_family = model.family.configured(_defaults(apply_t5_attn_mask=True, text_encoder_max_tokens=32))
    model = replace(model, family=masked_family)
    hidden, _ = model.encode_texts(["a red circle", "sks"], 1)
    real = (t5_ids[:, :32] != 0).sum(dim=1)
    assert hidden.shape == (2, 32, 32)
    assert [int((hidden[i].abs().amax(dim=-1) > 0).sum()) for i in range(2)] == real.tolist()
    mask = joint_attention_mask(hidden, image_tokens=4)
    assert mask.shape == (2, 1, 1, 36) and mask[0, 0, 0, :int(real[0])].all() and not mask[1, 0, 0, int(real[1])]


def test_sd3_text_encoding_joins_clip_and_t5(tiny_sd3_dir: Path) -> None:
    model = load_model(str(tiny_sd3_dir), "auto", torch.float32)
    ids = model.tokenize(["a red circle"])
    assert [tuple(i.shape) for i in ids] == [(1, 77), (1, 77), (1, 256)]
    hidden, pooled = model.encode_texts(["a red circle"], 1)
    assert hidden.shape == (1, 77 + 256, 64) and pooled.shape == (1, 64)
    masked = model.family.configured(_defaults(apply_lg_attn_mask=True)).encode_prompts(model.text_encoders, ids, 1)
    assert not torch.allclose(masked[0][:, :77], hidden[:, :77])  # CLIP reads no padding
    assert torch.allclose(masked[0][:, 77:], hidden[:, 77:])
    tokenizer = model.tokenizers[1]
    assert torch.equal(clip_attention_mask(ids[1]), tokenizer(["a red circle"], max_length=77, padding="max_length",
                                                              return_tensors="pt").attention_mask)


def test_latent_packing_matches_diffusers() -> None:
    from diffusers import FluxPipeline

    latents = torch.randn(2, 4, 6, 8)
    packed = pack_latents(latents)
    assert torch.equal(packed, FluxPipeline._pack_latents(latents, 2, 4, 6, 8))
    assert torch.equal(unpack_latents(packed, 6, 8), latents)
    assert torch.equal(image_ids(3, 4, torch.device("cpu"), torch.float32),
                       FluxPipeline._prepare_latent_image_ids(2, 3, 4, "cpu", torch.float32))


def _linears(module: nn.Module) -> set[int]:
    return {id(m) for m in module.modules() if isinstance(m, nn.Linear)}


@pytest.mark.parametrize("name", ["sd3", "flux"])
def test_lora_targets_cover_every_block_linear_once(name: str, tiny_sd3_dir: Path, tiny_flux_dir: Path) -> None:
    model = load_model(str(tiny_sd3_dir if name == "sd3" else tiny_flux_dir), "auto", torch.float32)
    targets = model.family.lora_targets(model.unet)
    covered = [id(layer) for t in targets for layer in t.layers]
    blocks = [*model.unet.transformer_blocks, *getattr(model.unet, "single_transformer_blocks", [])]
    if name == "flux":  # and its input layers (in_dims), as sd-scripts names them
        unet = model.unet
        blocks += [unet.x_embedder, unet.context_embedder, unet.time_text_embed]
        assert [t.name for t in targets[-8:]] == [
            "lora_unet_img_in", "lora_unet_time_in_in_layer", "lora_unet_time_in_out_layer",
            "lora_unet_vector_in_in_layer", "lora_unet_vector_in_out_layer", "lora_unet_guidance_in_in_layer",
            "lora_unet_guidance_in_out_layer", "lora_unet_txt_in"]
    assert sorted(covered) == sorted(i for block in blocks for i in _linears(block))
    assert len({t.name for t in targets}) == len(targets)


def test_flux_linear1_splits_as_diffusers_reads_real_size_files() -> None:
    """diffusers reads kohya FLUX files only at the real sizes; at those, its split of a single block's linear1 is
    ours."""
    from diffusers import FluxTransformer2DModel
    from diffusers.loaders.lora_conversion_utils import _convert_kohya_flux_lora_to_diffusers

    from trainers.models.base import LoadedModel
    from trainers.models.flow_lora import kohya_to_diffusers

    with torch.device("meta"):
        transformer = FluxTransformer2DModel(num_layers=1, num_single_layers=1)
    targets = [t for t in family("flux").lora_targets(transformer) if t.name.endswith(("linear1", "img_attn_qkv"))]
    generator = torch.Generator().manual_seed(0)
    state = {}
    for target in targets:
        rows = sum(layer.out_features for layer in target.layers)
        state[f"{target.name}.lora_down.weight"] = torch.randn(2, target.layers[0].in_features, generator=generator)
        state[f"{target.name}.lora_up.weight"] = torch.randn(rows, 2, generator=generator)
        state[f"{target.name}.alpha"] = torch.tensor(1.0)
    model = LoadedModel(family("flux"), transformer, nn.Identity(), [], [], None, "flow", "meta")
    ours = kohya_to_diffusers(state, model, targets, ())
    theirs = _convert_kohya_flux_lora_to_diffusers(dict(state))
    assert set(ours) == set(theirs) and len(ours) == 2 * 7  # q, k, v, MLP in; q, k, v
    for key, value in ours.items():  # alpha / rank (0.5) is folded into A by both
        assert torch.allclose(value, theirs[key]), key


def test_fp8_base_is_for_loras_with_mixed_precision() -> None:
    from trainers.core.options import config_from_dict
    from trainers.methods.lora.rules import issues

    cfg = config_from_dict("lora", {"fp8_base": True})
    assert [i.field for i in issues(cfg) if "fp8_base" in i.field or "mixed" in i.message] == ["fp8_base"]
    assert not [i for i in issues(cfg.replace(mixed_precision="bf16")) if i.field == "fp8_base"]
    assert "fp8_base" not in config_from_dict("finetune", {}).values
