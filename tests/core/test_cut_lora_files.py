"""LoRA files cut short (an interrupted download or copy: the header whole, the last tensor's bytes gone) are named
with the option that gives them before anything loads: network_weights and base_weights by the run's checks
(Validate, --print-config, the run's start), and again where the run reads them (the tools' inputs:
tests/tools/test_cut_inputs.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainers.core.errors import ConfigError
from trainers.core.options import config_from_dict
from trainers.demo import build_dataset
from trainers.models.checks import model_issues
from tests.tools.lora_samples import sample_modules, write


def _cut(path: Path, keep: int = 40) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - keep])
    return path


@pytest.fixture()
def cut_lora(tmp_path: Path) -> Path:
    return _cut(write(tmp_path / "start lora.safetensors", sample_modules()))


def _config(tiny_sd1_dir: Path, tmp_path: Path, **values: object):
    data = build_dataset(tmp_path / "data", folder="3_sks shape")
    return config_from_dict("lora", {"pretrained_model_name_or_path": str(tiny_sd1_dir), "train_data_dir": str(data),
                                     "output_dir": str(tmp_path / "out"), "max_train_epochs": 1, "resolution": "64",
                                     **values})


def test_a_cut_network_weights_or_base_weights_file_is_named_by_the_checks(tiny_sd1_dir: Path, tmp_path: Path,
                                                                           cut_lora: Path) -> None:
    whole = write(tmp_path / "whole.safetensors", sample_modules())
    config = _config(tiny_sd1_dir, tmp_path, network_weights=str(cut_lora), base_weights=[str(whole), str(cut_lora)])
    said = {i.field: i.message for i in model_issues(config.values)}  # what Validate and the run's start check
    assert said["network_weights"].startswith(f"{cut_lora} is cut short: its header lists"), said
    assert said["base_weights"].startswith(f"{cut_lora} is cut short"), said
    fine = model_issues(_config(tiny_sd1_dir, tmp_path, network_weights=str(whole), base_weights=[str(whole)]).values)
    assert not {"network_weights", "base_weights"} & {i.field for i in fine}


def test_the_run_names_a_cut_file_where_it_reads_it(tiny_sd1_dir: Path, tmp_path: Path, cut_lora: Path) -> None:
    from trainers.methods.lora.base_weights import merge_base_weights
    from trainers.methods.lora.trainer import _start_weights
    from trainers.models import load_model

    model = load_model(str(tiny_sd1_dir), "auto", torch.float32)
    with pytest.raises(ConfigError, match=r"network_weights: .*start lora\.safetensors is cut short"):
        _start_weights(_config(tiny_sd1_dir, tmp_path, network_weights=str(cut_lora)), model.family)
    with pytest.raises(ConfigError, match=r"base_weights: .*start lora\.safetensors is cut short"):
        merge_base_weights(model, [str(cut_lora)], [1.0])


def test_a_base_weights_lora_of_other_shapes_is_named(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    from trainers.methods.lora.base_weights import merge_base_weights
    from trainers.methods.lora.file_format import save_lora_file
    from trainers.models import load_model

    model = load_model(str(tiny_sd1_dir), "auto", torch.float32)
    wider = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn2_to_k"  # reads the text's width
    layer = model.unet.down_blocks[0].attentions[0].transformer_blocks[0].attn2.to_k
    out, inputs = layer.weight.shape
    path = tmp_path / "sd2 lora.safetensors"
    save_lora_file(path, {f"{wider}.lora_down.weight": torch.zeros(2, inputs * 2),
                          f"{wider}.lora_up.weight": torch.zeros(out, 2), f"{wider}.alpha": torch.tensor(2.0)}, {})
    with pytest.raises(ConfigError, match=r"(?s)base_weights: .*sd2 lora\.safetensors does not fit this SD1\.x model "
                                          rf".*{wider}\.lora_down\.weight: shape \(2, {inputs * 2}\) in the file"):
        merge_base_weights(model, [str(path)], [1.0])
