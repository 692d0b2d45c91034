"""Wan 2.1 text-to-video from ComfyUI's split files: a tiny Wan of the real classes (heads as wide as the published
ones and the published VAE's structure and latent statistics: what the files do not tell) saved as a diffusion_models
file in Wan-AI's names, umt5_xxl_fp16 and wan_2.1_vae files, read back with diffusers' own converters to the same
weights and outputs as its folder, and a LoRA trained from them equal to one from the folder; what is missing, scaled
fp8 or a Wan model's file not trained here named by file and option before anything loads (the other Wan models' files:
test_single_file_wan_models.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from family_checks import load_split_files
from helpers import train
from safetensors.torch import load_file, save_file
from wan_split_files import comfy_files, tiny_folder

from trainers.core.options import BY_NAME
from trainers.demo import build_dataset
from trainers.models import ModelFiles, load_model
from trainers.models.checks import model_issues
from trainers.models.wan import single_file


@pytest.fixture(scope="module")
def wan(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("wan split files")
    folder = tiny_folder(root / "model", "t2v")
    return folder, comfy_files(folder, root / "comfy", "t2v")


def _issues(**values: object) -> list:
    return model_issues({**{n: o.default for n, o in BY_NAME.items()}, **values})


def test_the_layouts_are_diffusers_converters_inverse() -> None:
    """Wan-AI's names written here are what diffusers' convert_wan_*_to_diffusers read back, every key."""
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers, convert_wan_vae_to_diffusers

    transformer = WanTransformer3DModel(num_attention_heads=1, attention_head_dim=128, in_channels=16,
                                        out_channels=16, text_dim=32, freq_dim=16, ffn_dim=32, num_layers=2)
    state = transformer.state_dict()
    reference = single_file.to_reference(state)
    assert {"blocks.0.self_attn.q.weight", "patch_embedding.weight", "head.head.weight", "head.modulation",
            "blocks.1.modulation", "blocks.0.norm3.weight", "text_embedding.0.weight"} <= set(reference)
    assert convert_wan_transformer_to_diffusers(dict(reference)).keys() == state.keys()
    vae = AutoencoderKLWan(base_dim=8, dim_mult=[1, 2, 4, 4], num_res_blocks=2, temperal_downsample=[False, True, True])
    reference = single_file.vae_to_reference(vae.state_dict())
    assert {"encoder.conv1.weight", "conv2.weight", "decoder.upsamples.4.shortcut.weight",
            "decoder.middle.1.to_qkv.weight"} <= set(reference)
    assert convert_wan_vae_to_diffusers(reference).keys() == vae.state_dict().keys()


@pytest.mark.slow  # builds, saves and loads the tiny model twice
def test_comfyuis_split_files_load_as_the_folder(wan: tuple[Path, dict[str, str]]) -> None:
    folder, files = wan
    assert _issues(**files) == []  # Validate takes them
    single = load_split_files(files)
    ours = load_model(str(folder), "auto", torch.float32)
    assert single.family.name == "wan21" and type(single.text_encoders[0]).__name__ == "UMT5EncoderModel"
    for got, want in ((single.unet, ours.unet), (single.text_encoders[0], ours.text_encoders[0]),
                      (single.vae, ours.vae)):
        theirs = want.state_dict()
        assert got.state_dict().keys() == theirs.keys()
        assert all(torch.equal(v, theirs[k]) for k, v in got.state_dict().items())
    assert single.vae.config.latents_mean == ours.vae.config.latents_mean
    hidden, mask = single.encode_texts(["a red fox runs through snow"], 1)
    want_hidden, want_mask = ours.encode_texts(["a red fox runs through snow"], 1)
    assert torch.allclose(hidden, want_hidden, atol=1e-6) and torch.equal(mask, want_mask)
    noisy = torch.randn(1, 16, 2, 4, 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = single.family.denoise(single.unet, noisy, torch.tensor([500.0]), hidden, mask, None)
        want = ours.family.denoise(ours.unet, noisy, torch.tensor([500.0]), hidden, mask, None)
    assert torch.allclose(got, want, atol=1e-5)


@pytest.mark.slow  # builds, saves and loads the tiny model
def test_the_vae_option_loads_a_wan_autoencoder_folder_beside_the_files(wan: tuple[Path, dict[str, str]]) -> None:
    """`vae` (a diffusers folder) instead of the `ae` file: read as the family's autoencoder class, not SD's."""
    folder, files = wan
    given = {k: v for k, v in files.items() if k != "ae"}
    single = load_model(given.pop("pretrained_model_name_or_path"), "auto", torch.float32, vae_path=str(folder / "vae"),
                        files=ModelFiles.from_values(given))
    ours = load_model(str(folder), "auto", torch.float32)
    assert type(single.vae).__name__ == "AutoencoderKLWan"
    theirs = ours.vae.state_dict()
    assert all(torch.equal(v, theirs[k]) for k, v in single.vae.state_dict().items())


@pytest.mark.slow  # builds, saves and loads the tiny model
def test_wan_ais_own_umt5_file_is_read_as_comfyuis(wan: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """models_t5_umt5-xxl-enc-bf16.pth (Wan-AI's names: token_embedding, blocks.N.attn.q, ffn.gate.0; musubi-tuner's
    --t5) gives the same UMT5 as ComfyUI's umt5_xxl_fp16.safetensors."""
    _, files = wan
    comfy = load_file(files["text_encoder"])
    theirs = single_file.umt5_to_reference(comfy)
    assert {"token_embedding.weight", "blocks.0.attn.q.weight", "blocks.1.pos_embedding.embedding.weight",
            "blocks.0.ffn.gate.0.weight", "norm.weight"} <= set(theirs)
    pth = tmp_path / "models_t5_umt5-xxl-enc-bf16.pth"
    torch.save(theirs, pth)
    given = {**files, "text_encoder": str(pth)}
    assert _issues(**given) == []
    model = given.pop("pretrained_model_name_or_path")
    read = load_model(model, "auto", torch.float32, files=ModelFiles.from_values(given)).text_encoders[0]
    want = load_model(model, "auto", torch.float32, files=ModelFiles.from_values(
        {k: v for k, v in files.items() if k != "pretrained_model_name_or_path"})).text_encoders[0]
    assert all(torch.equal(v, want.state_dict()[k]) for k, v in read.state_dict().items())


@pytest.mark.slow  # two 1-step LoRA runs
def test_a_lora_trained_from_the_files_equals_one_from_the_folder(wan: tuple[Path, dict[str, str]],
                                                                  tmp_path: Path) -> None:
    folder, files = wan
    common = {"train_data_dir": str(build_dataset(tmp_path / "data", folder="2_sks shape")), "resolution": "64",
              "max_train_steps": 1, "train_batch_size": 2, "max_data_loader_n_workers": 0, "learning_rate": 1e-2,
              "network_dim": 4, "save_precision": "float", "seed": 3, "timestep_sampling": "shift",
              "discrete_flow_shift": 3.0}
    assert train("lora", tmp_path / "files", **files, **common, output_dir=str(tmp_path / "a"), output_name="l") == 0
    assert train("lora", tmp_path / "folder", **common, pretrained_model_name_or_path=str(folder),
                 output_dir=str(tmp_path / "b"), output_name="l") == 0
    from_files, from_folder = load_file(tmp_path / "a" / "l.safetensors"), load_file(tmp_path / "b" / "l.safetensors")
    assert from_files.keys() == from_folder.keys() and "lora_unet_blocks_0_self_attn_q.lora_up.weight" in from_files
    assert max((from_files[k] - from_folder[k]).abs().max().item() for k in from_files) < 1e-5


@pytest.mark.slow  # builds and saves the tiny model
def test_a_missing_part_is_named_with_its_file_and_option(wan: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    _, files = wan
    model = files["pretrained_model_name_or_path"]
    issues = _issues(pretrained_model_name_or_path=model)
    assert [i.field for i in issues] == ["text_encoder", "ae"]
    assert all("wan2.1_t2v_tiny_fp16.safetensors" in i.message and "Wan 2.1" in i.message for i in issues)
    assert "set text_encoder" in issues[0].message and "umt5_xxl" in issues[0].message
    (wrong,) = _issues(pretrained_model_name_or_path=model, text_encoder=files["ae"], ae=files["ae"])
    assert wrong.field == "text_encoder" and "T5 encoder" in wrong.message
    out = tmp_path / "out"  # a run without its text encoder stops before writing anything
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=model, ae=files["ae"],
                 train_data_dir=str(tmp_path), output_dir=str(out), max_train_steps=1) != 0
    assert not out.exists() or not any(out.iterdir())


def _fake(path: Path, channels: int, *extra: str, scaled: bool = False) -> str:
    """A Wan reference-layout header: its input channels and modules, the tensors themselves tiny."""
    state = {"patch_embedding.weight": torch.zeros(1, channels, 1, 1, 1), "head.modulation": torch.zeros(1),
             "head.head.weight": torch.zeros(4, 1), **{k: torch.zeros(1) for k in extra}}
    if scaled:
        state.update({"scaled_fp8": torch.zeros(1), "blocks.0.self_attn.q.scale_weight": torch.zeros(1)})
    save_file({f"model.diffusion_model.{k}": v for k, v in state.items()}, path)
    return str(path)


@pytest.mark.parametrize("channels, extra, named", [
    (16, ("vace_blocks.0.after_proj.bias",), "Wan VACE"), (16, ("motion_encoder.enc.fc.weight",), "Wan Animate"),
    (36, ("img_emb.proj.0.weight", "img_emb.emb_pos"), "first-last-frame")])
def test_the_wan_models_not_trained_here_are_refused_by_name(tmp_path: Path, channels: int, extra: tuple[str, ...],
                                                             named: str) -> None:
    (issue,) = _issues(pretrained_model_name_or_path=_fake(tmp_path / "model.safetensors", channels, *extra))
    assert issue.field == "pretrained_model_name_or_path" and named in issue.message, issue.message
    assert "does not read" in issue.message


def test_scaled_fp8_files_are_refused_by_name(tmp_path: Path) -> None:
    model = _fake(tmp_path / "wan2.1_t2v_1.3B_fp8_scaled.safetensors", 16, scaled=True)
    text = tmp_path / "umt5_xxl_fp8_e4m3fn_scaled.safetensors"
    save_file({"shared.weight": torch.zeros(4, 2), "scaled_fp8": torch.zeros(1),
               "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": torch.zeros(2, 1),
               "encoder.block.0.layer.0.SelfAttention.q.scale_weight": torch.zeros(1)}, text)
    issues = {i.field: i.message for i in _issues(pretrained_model_name_or_path=model, text_encoder=str(text))}
    assert "scaled fp8" in issues["pretrained_model_name_or_path"] and "fp8_scaled" in \
        issues["pretrained_model_name_or_path"]
    assert "scaled fp8" in issues["text_encoder"] and text.name in issues["text_encoder"]


def test_a_t5_file_given_for_umt5_is_named(tmp_path: Path) -> None:
    model = _fake(tmp_path / "wan2.1_t2v_1.3B_fp16.safetensors", 16)
    t5 = tmp_path / "t5xxl_fp16.safetensors"  # T5's position bias is in its first block only; UMT5's in every one
    bias = "encoder.block.{}.layer.0.SelfAttention.relative_attention_bias.weight"
    save_file({"shared.weight": torch.zeros(4, 2), bias.format(0): torch.zeros(2, 1),
               "encoder.block.0.layer.0.layer_norm.weight": torch.zeros(2),
               "encoder.block.1.layer.0.layer_norm.weight": torch.zeros(2)}, t5)
    issues = _issues(pretrained_model_name_or_path=model, text_encoder=str(t5))
    assert [i.field for i in issues] == ["text_encoder"] and "not the UMT5-XXL" in issues[0].message
