"""Chroma from the files users have, as sd-scripts' model_type chroma takes them: `chroma-unlocked-*.safetensors`
(the transformer in lodestones' reference layout) with `t5xxl` and `ae` files; the same model as the diffusers
folder, a LoRA trained from them equal to one trained from the folder, and what is missing or wrong named before
anything is written."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import train
from safetensors.torch import load_file

from trainers.core.options import BY_NAME
from trainers.demo import build_dataset
from trainers.models import ModelFiles, load_model
from trainers.models.checks import model_issues
from trainers.models.chroma.tiny import build_tiny_chroma
from trainers.models.tiny_flow import write_reference_files

pytestmark = pytest.mark.slow  # builds, saves and loads the tiny model


@pytest.fixture(scope="module")
def chroma(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("chroma files")
    folder = build_tiny_chroma(root / "diffusers", reference_heads=True)
    return folder, {k: str(v) for k, v in write_reference_files(folder, root / "sd-scripts files").items()}


def _issues(**values: object) -> list:
    return model_issues({**{n: o.default for n, o in BY_NAME.items()}, **values})


def test_the_reference_layout_matches_diffusers_converter_at_real_widths() -> None:
    from accelerate import init_empty_weights
    from diffusers import ChromaTransformer2DModel
    from diffusers.loaders.single_file_utils import convert_chroma_transformer_checkpoint_to_diffusers

    from trainers.models.chroma.reference import to_reference

    with init_empty_weights():
        transformer = ChromaTransformer2DModel(num_layers=1, num_single_layers=1)  # Chroma's published widths
    state = transformer.state_dict()
    back = convert_chroma_transformer_checkpoint_to_diffusers(to_reference(state, transformer.config))
    assert back.keys() == state.keys()
    assert all(back[k].shape == state[k].shape for k in state)


def test_the_files_load_as_the_diffusers_folder(chroma: tuple[Path, dict[str, str]]) -> None:
    folder, files = chroma
    options = dict(files)
    from_files = load_model(options.pop("pretrained_model_name_or_path"), "auto", torch.float32,
                            files=ModelFiles.from_values(options))
    from_folder = load_model(str(folder), "auto", torch.float32)
    assert from_files.family.title == "Chroma" and type(from_files.unet) is type(from_folder.unet)
    hidden, mask = from_files.encode_texts(["sks shape, a red circle"], 1)
    want_hidden, want_mask = from_folder.encode_texts(["sks shape, a red circle"], 1)
    assert torch.allclose(hidden, want_hidden, atol=1e-6) and torch.equal(mask, want_mask)
    noisy = torch.randn(1, from_folder.vae.config.latent_channels, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = from_files.family.denoise(from_files.unet, noisy, torch.tensor([500.0]), hidden, mask, None)
        want = from_folder.family.denoise(from_folder.unet, noisy, torch.tensor([500.0]), hidden, mask, None)
        assert torch.allclose(got, want, atol=1e-5)
        pixels = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(2)) * 2 - 1
        assert torch.allclose(from_files.vae.encode(pixels).latent_dist.mean,
                              from_folder.vae.encode(pixels).latent_dist.mean, atol=1e-5)
    assert from_files.vae.config.shift_factor == from_folder.vae.config.shift_factor


def test_a_lora_trained_from_the_files_equals_one_from_the_folder(chroma: tuple[Path, dict[str, str]],
                                                                  tmp_path: Path) -> None:
    folder, files = chroma
    common = {"train_data_dir": str(build_dataset(tmp_path / "data", folder="2_sks shape")), "resolution": "64",
              "max_train_steps": 1, "train_batch_size": 2, "max_data_loader_n_workers": 0, "learning_rate": 1e-2,
              "network_dim": 4, "save_precision": "float", "text_encoder_max_tokens": 32, "seed": 3,
              "timestep_sampling": "sigmoid", "model_prediction_type": "raw", "guidance_scale": 0.0}
    assert train("lora", tmp_path / "files", **files, **common, output_dir=str(tmp_path / "a"), output_name="l") == 0
    assert train("lora", tmp_path / "folder", **common, pretrained_model_name_or_path=str(folder),
                 output_dir=str(tmp_path / "b"), output_name="l") == 0
    from_files, from_folder = load_file(tmp_path / "a" / "l.safetensors"), load_file(tmp_path / "b" / "l.safetensors")
    assert from_files.keys() == from_folder.keys()
    assert max((from_files[k] - from_folder[k]).abs().max().item() for k in from_files) < 1e-5


def test_what_is_missing_or_of_another_family_is_named(chroma: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    _, files = chroma
    model = files["pretrained_model_name_or_path"]
    assert not _issues(**files)
    (missing,) = _issues(pretrained_model_name_or_path=model, ae=files["ae"])
    assert missing.field == "t5xxl" and "Chroma" in missing.message and "T5-XXL" in missing.message
    mismatch = [i for i in _issues(**files, model_family="flux") if i.field == "model_family"]
    assert mismatch and "Chroma" in mismatch[0].message
    out = tmp_path / "out"  # a run without its text encoder stops before writing anything
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=model, ae=files["ae"],
                 train_data_dir=str(tmp_path), output_dir=str(out), max_train_steps=1) != 0
    assert not out.exists() or not any(out.iterdir())


def test_an_sd_scripts_chroma_config_with_its_files_validates(chroma: tuple[Path, dict[str, str]],
                                                              tmp_path: Path) -> None:
    from trainers.adapters.kohya.page_import import import_kohya_file

    _, files = chroma
    toml = tmp_path / "chroma.toml"  # sd-scripts' docs/flux_train_network.md Chroma example with its files
    toml.write_text("\n".join(['model_type = "chroma"', 'network_module = "networks.lora_flux"',
                               "apply_t5_attn_mask = true", "guidance_scale = 0.0", 'timestep_sampling = "sigmoid"',
                               'model_prediction_type = "raw"',
                               *(f'{k} = "{files[k]}"' for k in ("pretrained_model_name_or_path", "t5xxl", "ae"))]),
                    encoding="utf-8")
    _, values, _ = import_kohya_file(toml)
    assert values["model_family"] == "chroma" and values["t5xxl"] == files["t5xxl"]
    assert _issues(**values) == []
