"""tools convert --to musubi: a Z-Image LoRA Atelier wrote (ComfyUI's fused q, k, v) in musubi-tuner's own names,
the same update; another family's LoRA is refused by name."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lora_samples import run

from trainers.core.errors import ToolError
from trainers.methods.lora.file_format import read_lora_file, save_lora_file

QKV, WIDTH, RANK = "lora_unet_layers_0_attention_qkv", 8, 4


def test_a_zimage_lora_converts_to_musubis_split_modules(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(0)
    down, up = torch.randn(RANK, WIDTH, generator=generator), torch.randn(3 * WIDTH, RANK, generator=generator)
    source = tmp_path / "z image é.safetensors"
    save_lora_file(source, {f"{QKV}.lora_down.weight": down, f"{QKV}.lora_up.weight": up,
                            f"{QKV}.alpha": torch.tensor(2.0)},
                   {"ss_base_model_version": "z_image", "ss_network_module": "networks.lora_zimage"})
    out = run("convert", tmp_path / "job", input=str(source), to="musubi")
    tensors, metadata = read_lora_file(out)
    assert metadata["ss_network_module"] == "networks.lora_zimage"
    assert {k.partition(".")[0] for k in tensors} == {f"lora_unet_layers_0_attention_to_{n}" for n in "qkv"}
    v = "lora_unet_layers_0_attention_to_v"
    assert torch.equal(tensors[f"{v}.lora_up.weight"] @ tensors[f"{v}.lora_down.weight"], (up @ down)[2 * WIDTH:])


def test_another_familys_lora_is_refused_by_name(tmp_path: Path) -> None:
    source = tmp_path / "flux.safetensors"
    save_lora_file(source, {"lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight": torch.zeros(2, 4),
                            "lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight": torch.zeros(12, 2)},
                   {"ss_base_model_version": "flux1"})
    with pytest.raises(ToolError, match="musubi-tuner's Z-Image layout"):
        run("convert", tmp_path / "job", input=str(source), to="musubi")
