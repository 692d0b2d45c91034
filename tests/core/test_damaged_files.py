"""Model files cut short or damaged (an interrupted download or copy) are named before training, with the option
that names them: every tensor's bytes must lie inside the file as safetensors requires (trainers/core/fsio.py), and a
PyTorch zip pickle must have its directory. The check path of Validate and the run (model_issues) is the one used;
the table of tests/core/test_model_checks.py runs the model and vae cases through Validate, --print-config and the
run's check."""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests.helpers import events, train
from trainers.core.fsio import DamagedSafetensors, read_safetensors_header
from trainers.demo import build_dataset
from trainers.models.checks import model_issues


def _with_header(path: Path, header: dict, data: bytes) -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def _t5(path: Path) -> Path:
    save_file({"shared.weight": torch.zeros(8, 4),
               "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": torch.zeros(4, 2)}, path)
    return path


def test_a_header_that_does_not_fit_its_data_is_refused_by_name(tmp_path: Path) -> None:
    whole = _with_header(tmp_path / "whole.safetensors",
                         {"a": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 8]},
                          "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}, bytes(12))
    assert read_safetensors_header(whole, whole=True)[0] == {"a": (2, 2), "b": (1,)}
    cases = {  # name -> (header, data bytes, words of the message)
        "cut": ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, 10, ["cut short", "16", "10"]),
        "wrong size": ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}, 8, ["'a'", "16 bytes"]),
        "gap": ({"a": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]}}, 6, ["'a'", "starts at byte 4"]),
        "trailing bytes": ({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}, 5, ["3 bytes follow"]),
        "no offsets": ({"a": {"dtype": "U8", "shape": [2]}}, 2, ["'a'", "data_offsets"]),
    }
    for name, (header, size, words) in cases.items():
        path = _with_header(tmp_path / f"{name}.safetensors", header, bytes(size))
        with pytest.raises(DamagedSafetensors) as refused:
            read_safetensors_header(path, whole=True)
        message = str(refused.value)
        assert str(path) in message and "download or copy the file again" in message, (name, message)
        assert all(word in message for word in words), (name, message)


def test_a_cut_component_file_is_named_with_its_option(tmp_path: Path) -> None:
    flux = tmp_path / "flux.safetensors"
    save_file({"double_blocks.0.img_attn.qkv.weight": torch.zeros(3, 1)}, flux)
    t5 = _t5(tmp_path / "t5 xxl ü.safetensors")
    assert "t5xxl" not in {i.field for i in model_issues({"pretrained_model_name_or_path": str(flux),
                                                          "t5xxl": str(t5)})}
    t5.write_bytes(t5.read_bytes()[:-20])
    [issue] = [i for i in model_issues({"pretrained_model_name_or_path": str(flux), "t5xxl": str(t5)})
               if i.field == "t5xxl"]
    assert issue.message.startswith(f"{t5} is cut short")


def test_a_cut_pickle_checkpoint_is_named_before_it_loads(tmp_path: Path) -> None:
    ckpt = tmp_path / "model.ckpt"
    torch.save({"state_dict": {"model.diffusion_model.input_blocks.0.0.weight": torch.zeros(8, 4, 3, 3)}}, ckpt)
    values = {"pretrained_model_name_or_path": str(ckpt), "model_family": "sd15"}
    assert not [i for i in model_issues(values) if i.field == "pretrained_model_name_or_path"]
    ckpt.write_bytes(ckpt.read_bytes()[:-100])
    [issue] = model_issues(values)
    assert issue.field == "pretrained_model_name_or_path" and issue.message.startswith(f"{ckpt} is cut short")


@pytest.mark.slow
def test_a_model_that_fails_to_load_is_named_and_leaves_no_output_dir(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    """Weights whole but not of the model's config (what no header check can tell): the run ends naming the folder
    and the option, without a traceback, and output_dir is created only once the model loaded."""
    from safetensors.torch import load_file

    model = tmp_path / "mismatched model"
    shutil.copytree(tiny_sd1_dir, model)
    weights = model / "unet" / "diffusion_pytorch_model.safetensors"
    state = load_file(weights)
    state["conv_in.weight"] = torch.zeros(3, *state["conv_in.weight"].shape[1:])
    save_file(state, weights)
    out = tmp_path / "out"
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=str(model), output_dir=str(out),
                 train_data_dir=str(build_dataset(tmp_path / "data", folder="1_sks shape")), resolution="64",
                 max_train_steps=1) == 2
    [error] = [e for e in events(tmp_path / "run") if e["type"] == "error"]
    assert error["message"].startswith(f"pretrained_model_name_or_path: {model / 'unet'} cannot be loaded")
    assert "trace" not in error and not out.exists()


def test_a_vae_folder_that_fails_to_load_is_named_with_the_vae_option(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    """What single files and folders load a `vae` folder by (past the checks: e.g. a hub model's)."""
    from trainers.models.components import vae_folder
    from trainers.models.rules import ModelLoadError

    assert type(vae_folder(str(tiny_sd1_dir / "vae"))).__name__ == "AutoencoderKL"
    vae = tmp_path / "my vae"
    shutil.copytree(tiny_sd1_dir / "vae", vae)
    weights = vae / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-64])
    with pytest.raises(ModelLoadError) as refused:
        vae_folder(str(vae))
    assert str(refused.value).startswith(f"vae: {vae} cannot be loaded")


def test_each_shard_a_sharded_index_names_is_checked(tmp_path: Path) -> None:
    from trainers.models.checks import damaged_weights

    part = tmp_path / "text_encoder_2"
    part.mkdir()
    save_file({"a": torch.zeros(4)}, part / "model-00001-of-00003.safetensors")
    save_file({"b": torch.zeros(4)}, part / "model-00002-of-00003.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00003.safetensors", "b": "model-00002-of-00003.safetensors"}}
    (part / "model.safetensors.index.json").write_text(json.dumps(index))
    assert damaged_weights(tmp_path) == []
    index["weight_map"]["c"] = "model-00003-of-00003.safetensors"
    (part / "model.safetensors.index.json").write_text(json.dumps(index))
    shard = part / "model-00002-of-00003.safetensors"
    shard.write_bytes(shard.read_bytes()[:-4])
    missing, cut = damaged_weights(tmp_path)
    assert missing.startswith(f"{part / 'model-00003-of-00003.safetensors'} is missing")
    assert cut.startswith(f"{shard} is cut short")
