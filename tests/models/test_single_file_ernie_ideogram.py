"""ERNIE-Image and Ideogram 4 from ComfyUI's split files (the diffusion_models file, a text_encoders file, FLUX.2's
vae/flux2-vae file): the transformer layouts are ComfyUI's names and round trip to diffusers' weights (ERNIE-Image's
as diffusers' own converter reads it; Ideogram 4's fused qkv as diffusers' LoRA conversion splits it), FLUX.2's
autoencoder in Black Forest Labs' layout reads back to the same model, Comfy-Org's scaled fp8 files (both forms)
dequantize to weight x scale in the training dtype, and a tiny model of each family saved as those files loads to its
folder's weights and encodings, trains the same 2-step LoRA and writes a finetune file that reads back; other files are
refused by name before anything loads."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch
from family_checks import load_split_files, loras_from_files_and_folder
from safetensors.torch import load_file, save_file

from trainers.core.options import BY_NAME
from trainers.models import load_model
from trainers.models.checks import model_issues

CAPTIONS = ["sks shape", "a red square on a table"]


@dataclass(frozen=True)
class Family:
    name: str
    title: str
    build: Callable[[Path], Path]  # a tiny folder whose heads are as wide as the published (files do not tell)
    comfy_names: tuple[str, ...]  # tensors ComfyUI's model of the family has (comfy/ldm/ernie; Comfy-Org's files)
    lora_key: str  # a key its LoRA files have


def _ernie(folder: Path) -> Path:
    from trainers.models.ernie_image.tiny import build_tiny_ernie_image

    return build_tiny_ernie_image(folder, published_widths=True)


def _ideogram(folder: Path) -> Path:
    from trainers.models.ideogram4.tiny import build_tiny_ideogram4

    return build_tiny_ideogram4(folder, published_widths=True)


ERNIE = Family("ernie_image", "ERNIE-Image", _ernie, (
    "x_embedder.proj.weight", "text_proj.weight", "time_embedding.linear_1.weight", "adaLN_modulation.1.weight",
    "layers.0.adaLN_sa_ln.weight", "layers.0.self_attention.to_q.weight", "layers.0.self_attention.norm_k.weight",
    "layers.0.self_attention.to_out.0.weight", "layers.0.adaLN_mlp_ln.weight", "layers.1.mlp.linear_fc2.weight",
    "final_norm.linear.weight", "final_linear.bias"), "diffusion_model.layers.0.self_attention.to_q.lora_A.weight")
IDEOGRAM = Family("ideogram4", "Ideogram 4", _ideogram, (
    "input_proj.weight", "llm_cond_norm.weight", "llm_cond_proj.weight", "t_embedding.mlp_in.weight",
    "adaln_proj.weight", "embed_image_indicator.weight", "layers.0.attention.qkv.weight", "layers.0.attention.o.weight",
    "layers.0.attention.norm_q.weight", "layers.1.feed_forward.w3.weight", "layers.0.attention_norm2.weight",
    "layers.0.adaln_modulation.bias", "final_layer.linear.weight", "final_layer.adaln_modulation.weight"),
    "diffusion_model.layers.0.attention.qkv.lora_down.weight")
FAMILIES = {f.name: f for f in (ERNIE, IDEOGRAM)}


def _issues(**values: object) -> list:
    return model_issues({**{n: o.default for n, o in BY_NAME.items()}, **values})


def _transformer(family: Family) -> torch.nn.Module:
    if family is ERNIE:
        from trainers.models.ernie_image.tiny import tiny_ernie_transformer

        return tiny_ernie_transformer()
    from trainers.models.ideogram4.tiny import tiny_ideogram4_transformer

    return tiny_ideogram4_transformer(published_heads=True)


def _reference(family: Family):  # noqa: ANN202 - the family's reference module
    import importlib

    return importlib.import_module(f"trainers.models.{family.name}.reference")


@pytest.mark.parametrize("family", FAMILIES.values(), ids=FAMILIES)
def test_the_transformer_layout_is_comfyuis_and_round_trips(family: Family) -> None:
    transformer = _transformer(family)
    state, reference = transformer.state_dict(), _reference(family)
    ref = reference.to_reference(state, transformer.config)
    assert set(family.comfy_names) <= set(ref)
    nested = {f"model.diffusion_model.{k}": tuple(v.shape) for k, v in ref.items()}
    config = reference.config_from_shapes(reference.strip_prefix(nested), "model.safetensors")
    assert {k: v for k, v in config.items() if k in transformer.config} == \
        {k: (list(v) if isinstance(v, tuple) else v) for k, v in transformer.config.items()
         if k in config and not k.startswith("_")}
    back = reference.to_diffusers(ref, config, "model.safetensors")
    assert back.keys() == state.keys() and all(torch.equal(back[k], state[k]) for k in state)


def test_diffusers_own_converter_reads_ernie_images_layout() -> None:
    from diffusers.loaders.single_file_utils import convert_ernie_image_transformer_checkpoint_to_diffusers

    transformer = _transformer(ERNIE)
    ref = _reference(ERNIE).to_reference(transformer.state_dict(), transformer.config)
    theirs = convert_ernie_image_transformer_checkpoint_to_diffusers(
        {f"model.diffusion_model.{k}": v for k, v in ref.items()})
    assert theirs.keys() == transformer.state_dict().keys()


def test_ideogram4s_fused_qkv_is_what_diffusers_splits() -> None:
    """Diffusers' Ideogram 4 LoRA conversion splits `attention.qkv` into to_q, to_k, to_v in thirds: the file's qkv
    weight is the three stacked so."""
    transformer = _transformer(IDEOGRAM)
    ref = _reference(IDEOGRAM).to_reference(transformer.state_dict(), transformer.config)
    q, k, v = ref["layers.1.attention.qkv.weight"].chunk(3)
    attention = transformer.layers[1].attention
    assert torch.equal(q, attention.to_q.weight) and torch.equal(v, attention.to_v.weight)
    assert torch.equal(k, attention.to_k.weight) and torch.equal(ref["layers.1.attention.o.weight"],
                                                                 attention.to_out[0].weight)


def test_flux2s_autoencoder_in_black_forest_labs_layout_reads_back() -> None:
    from trainers.models.ernie_image import flux2_autoencoder
    from trainers.models.ernie_image.tiny import with_published_groups
    from trainers.models.flux2.tiny import tiny_flux2_vae

    vae = with_published_groups(tiny_flux2_vae(32))
    ref = flux2_autoencoder.to_reference(vae.state_dict(), vae.config)
    assert {"encoder.quant_conv.weight", "decoder.post_quant_conv.bias", "bn.running_mean", "bn.running_var",
            "encoder.down.0.block.0.conv1.weight", "encoder.mid.block_1.conv1.weight", "decoder.up.0.block.0.conv1.weight",
            "decoder.norm_out.weight"} <= set(ref)
    read = flux2_autoencoder.autoencoder(ref)
    theirs = vae.state_dict()
    assert all(torch.equal(v, theirs[k]) for k, v in read.state_dict().items() if k != "bn.num_batches_tracked")
    pixels = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        assert torch.equal(read.encode(pixels).latent_dist.mean, vae.encode(pixels).latent_dist.mean)


def _scaled(state: dict[str, torch.Tensor], newer: bool) -> dict[str, torch.Tensor]:
    """The blocks' 2-D weights as ComfyUI's scaled fp8 files hold them: fp8 weight / scale, one scale a layer;
    `newer`: Comfy-Org's weight_scale with a comfy_quant record, else scale_weight and the scaled_fp8 marker."""
    out = dict(state)
    record = torch.frombuffer(bytearray(json.dumps({"format": "float8_e4m3fn"}).encode()), dtype=torch.uint8)
    for key, weight in state.items():
        if not (key.startswith("layers.") and key.endswith(".weight") and weight.ndim == 2):
            continue
        layer, scale = key.removesuffix(".weight"), weight.abs().max().float() / 448
        out[key] = (weight.float() / scale).to(torch.float8_e4m3fn)
        out.update({f"{layer}.weight_scale": scale, f"{layer}.comfy_quant": record.clone()} if newer else
                   {f"{layer}.scale_weight": scale, f"{layer}.scale_input": torch.ones(())})
    return out if newer else {**out, "scaled_fp8": torch.empty(0, dtype=torch.float8_e4m3fn)}


@pytest.mark.parametrize("newer", [True, False], ids=["weight_scale", "scaled_fp8"])
def test_a_scaled_fp8_file_is_read_as_weight_times_scale(newer: bool, tmp_path: Path) -> None:
    from trainers.models.ideogram4.family import IDEOGRAM4
    from trainers.models.single_file.checkpoint import open_checkpoint

    transformer = _transformer(IDEOGRAM)
    ref = _reference(IDEOGRAM).to_reference(transformer.state_dict(), transformer.config)
    scaled = _scaled(ref, newer)
    save_file({k: v.contiguous() for k, v in scaled.items()}, tmp_path / "ideogram4_fp8_scaled.safetensors")
    read = IDEOGRAM4.denoiser_from_checkpoint(open_checkpoint(tmp_path / "ideogram4_fp8_scaled.safetensors"),
                                              torch.bfloat16).state_dict()
    scale = scaled["layers.0.attention.qkv.weight_scale" if newer else "layers.0.attention.qkv.scale_weight"]
    want = (scaled["layers.0.attention.qkv.weight"].float() * scale).to(torch.bfloat16)
    assert read["layers.0.attention.to_q.weight"].dtype == torch.bfloat16
    assert torch.equal(torch.cat([read[f"layers.0.attention.to_{p}.weight"] for p in "qkv"]), want)
    assert torch.equal(read["input_proj.weight"], ref["input_proj.weight"].to(torch.bfloat16))  # unscaled as it is
    original = transformer.state_dict()["layers.1.feed_forward.w2.weight"]
    assert (read["layers.1.feed_forward.w2.weight"].float() - original).abs().max() <= original.abs().max() / 8


def test_a_quantization_other_than_fp8_is_refused_by_name(tmp_path: Path) -> None:
    from trainers.models import ModelLoadError
    from trainers.models.ideogram4.scaled_fp8 import dequantized

    record = torch.frombuffer(bytearray(json.dumps({"format": "nvfp4"}).encode()), dtype=torch.uint8)
    state = {"layers.0.attention.o.weight": torch.zeros(4, 2, dtype=torch.uint8), "layers.0.attention.o.weight_scale":
             torch.ones(()), "layers.0.attention.o.comfy_quant": record}
    with pytest.raises(ModelLoadError, match=r"ideogram4_nvfp4\.safetensors stores layers\.0\.attention\.o as nvfp4"):
        dequantized(state, torch.bfloat16, "ideogram4_nvfp4.safetensors")


def test_a_transformer_of_other_head_widths_is_refused_by_name() -> None:
    from trainers.models import ModelLoadError
    from trainers.models.ideogram4.tiny import tiny_ideogram4_transformer

    transformer = tiny_ideogram4_transformer()  # heads 16 wide: its rope sections are not in its file
    ref = _reference(IDEOGRAM).to_reference(transformer.state_dict(), transformer.config)
    with pytest.raises(ModelLoadError, match="heads are 16 wide"):
        _reference(IDEOGRAM).config_from_shapes({k: tuple(v.shape) for k, v in ref.items()}, "model.safetensors")


@pytest.mark.parametrize("family", FAMILIES.values(), ids=FAMILIES)
def test_the_file_alone_names_what_it_lacks_and_a_wrong_family_is_refused(family: Family, tmp_path: Path) -> None:
    path = tmp_path / f"{family.name}.safetensors"
    save_file({k: torch.zeros(2, 2) for k in family.comfy_names}, path)
    issues = _issues(pretrained_model_name_or_path=str(path))
    assert [i.field for i in issues] == ["text_encoder", "ae"]
    assert all(path.name in i.message and family.title in i.message for i in issues)
    assert "flux2-vae" in issues[1].message
    other = next(f for f in FAMILIES.values() if f is not family)
    (issue,) = _issues(pretrained_model_name_or_path=str(path), model_family=other.name, text_encoder="te.safetensors",
                       ae="ae.safetensors")
    assert issue.field == "model_family" and family.title in issue.message


def test_flux1s_ae_is_refused_as_flux2s_by_name(tmp_path: Path) -> None:
    from trainers.models.convert import VAE_PREFIX, vae_to_ldm
    from trainers.models.tiny_flow import tiny_shifted_vae

    model = tmp_path / "ernie_image.safetensors"
    save_file({k: torch.zeros(2, 2) for k in ERNIE.comfy_names}, model)
    vae = tiny_shifted_vae(0.3611, 0.1159)
    ae = tmp_path / "ae.safetensors"
    save_file({k.removeprefix(VAE_PREFIX): v.contiguous() for k, v in vae_to_ldm(vae.state_dict(), vae.config).items()},
              ae)
    text_encoder = tmp_path / "te.safetensors"
    save_file({"model.embed_tokens.weight": torch.zeros(2, 2), "model.layers.0.self_attn.q_proj.weight":
               torch.zeros(2, 2)}, text_encoder)
    (issue,) = _issues(pretrained_model_name_or_path=str(model), text_encoder=str(text_encoder), ae=str(ae))
    assert issue.field == "ae" and "FLUX.2 autoencoder" in issue.message and "bn" in issue.message


def _comfy_files(folder: Path, out: Path) -> dict[str, str]:
    from trainers.models.tiny_flow import write_reference_files

    return {k: str(v) for k, v in write_reference_files(folder, out).items()}


@pytest.fixture(scope="module", params=FAMILIES.values(), ids=FAMILIES)
def split(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Family, Path, dict[str, str]]:
    family = request.param
    root = tmp_path_factory.mktemp(f"{family.name} split files")
    folder = family.build(root / "model")
    return family, folder, _comfy_files(folder, root / "comfy")


@pytest.mark.slow  # builds, saves and loads a tiny model of each family twice
def test_the_split_files_load_as_the_folder(split: tuple[Family, Path, dict[str, str]]) -> None:
    family, folder, files = split
    assert set(files) == {"pretrained_model_name_or_path", "text_encoder", "ae", "tokenizer_cache_dir"}
    assert _issues(**files) == []  # Validate takes them
    single, ours = load_split_files(files), load_model(str(folder), "auto", torch.float32)
    assert single.family.name == family.name
    for got, want in ((single.unet, ours.unet), (single.vae, ours.vae)):
        theirs = want.state_dict()
        assert got.state_dict().keys() == theirs.keys()
        assert all(torch.equal(v, theirs[k]) for k, v in got.state_dict().items())
    ids = single.family.tokenize(single.tokenizers, CAPTIONS)
    assert all(torch.equal(a, b) for a, b in zip(ids, ours.family.tokenize(ours.tokenizers, CAPTIONS)))
    hidden, mask = single.encode_texts(CAPTIONS, 1)
    want_hidden, want_mask = ours.encode_texts(CAPTIONS, 1)
    assert torch.allclose(hidden, want_hidden, atol=1e-6) and torch.equal(mask, want_mask)


@pytest.mark.slow  # two 2-step LoRA runs of each family
def test_a_lora_trained_from_the_files_equals_one_from_the_folder(split: tuple[Family, Path, dict[str, str]],
                                                                  tmp_path: Path) -> None:
    family, folder, files = split
    from_files, from_folder = loras_from_files_and_folder(files, folder, tmp_path, steps=2)
    assert from_files.keys() == from_folder.keys() and family.lora_key in from_files
    assert max((from_files[k] - from_folder[k]).abs().max().item() for k in from_files) < 1e-5


@pytest.mark.slow  # builds, saves and loads a tiny model of each family
def test_a_finetune_is_written_as_the_diffusion_models_file(split: tuple[Family, Path, dict[str, str]],
                                                            tmp_path: Path) -> None:
    """save_model_as 'safetensors' (which Validate takes now): the transformer alone in ComfyUI's layout, which reads
    back with the same split files."""
    from trainers.models.single_file.save import save_full_model

    family, _, files = split
    assert not [i for i in _issues(**files, save_model_as="safetensors") if i.field == "save_model_as"]
    model = load_split_files(files)
    with torch.no_grad():
        model.unet.layers[0].adaLN_sa_ln.weight.add_(1.0) if family is ERNIE else \
            model.unet.layers[0].attention_norm1.weight.add_(1.0)
    (written,) = save_full_model(model, tmp_path / "finetune", as_diffusers=False, dtype=torch.float32)
    saved = load_file(written)
    assert set(family.comfy_names) <= set(saved) and not any(k.startswith(("vae.", "text_encoders.")) for k in saved)
    again = load_split_files({**files, "pretrained_model_name_or_path": str(written)})
    trained = model.unet.state_dict()
    assert all(torch.equal(v, trained[k]) for k, v in again.unet.state_dict().items())


@pytest.mark.parametrize("family", FAMILIES.values(), ids=FAMILIES)
def test_a_vae_folder_with_the_files_is_refused_by_name(family: Family, tmp_path: Path) -> None:
    """The single-file loader reads `vae` as an AutoencoderKL folder, which FLUX.2's autoencoder is not: ae names
    its file."""
    path = tmp_path / f"{family.name}.safetensors"
    save_file({k: torch.zeros(2, 2) for k in family.comfy_names}, path)
    vae = tmp_path / "vae"
    vae.mkdir()
    (vae / "config.json").write_text(json.dumps({"_class_name": "AutoencoderKLFlux2", "latent_channels": 32}))
    issues = _issues(pretrained_model_name_or_path=str(path), text_encoder="te.safetensors", vae=str(vae))
    (issue,) = [i for i in issues if i.field == "vae" and "flux2-vae" in i.message]
    assert family.title in issue.message and "set ae" in issue.message
