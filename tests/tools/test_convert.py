"""tools convert: LoRA key formats both ways without a change (kohya <-> diffusers/PEFT <-> ComfyUI), files that
diffusers loads as it loads the kohya file, precision, and a model between folder and single file."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from lora_samples import digest, outputs, run, tiny_lora

from trainers.core.errors import ToolError
from trainers.methods.lora.file_format import read_lora_file
from trainers.tools.formats import ADAPTER_METADATA


def _round_trip(source: Path, model: Path, middle: str, tmp_path: Path) -> tuple[Path, Path]:
    there = run("convert", tmp_path / f"to_{middle}", input=str(source), to=middle, model=str(model))
    back = run("convert", tmp_path / "back", input=str(there), to="kohya", model=str(model))
    return there, back


def test_kohya_to_diffusers_and_back_is_identical_and_diffusers_loads_it_alike(tiny_sd1_dir: Path,
                                                                               tmp_path: Path) -> None:
    source = tiny_lora(tiny_sd1_dir, tmp_path / "lora.safetensors", alphas=True)  # LoCon, alphas 1, 2 and 3
    before = digest(source)
    there, back = _round_trip(source, tiny_sd1_dir, "diffusers", tmp_path)
    original, again = read_lora_file(source), read_lora_file(back)
    assert original[0].keys() == again[0].keys()
    assert all(torch.equal(original[0][k], again[0][k]) for k in original[0])
    assert again[1] == original[1]  # the metadata too (its hashes are the same tensors' hashes)
    assert digest(source) == before
    tensors, metadata = read_lora_file(there)
    assert any(k.startswith("unet.down_blocks.0.attentions.0.proj_in.lora_A") for k in tensors)
    assert any(k.startswith("text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_B") for k in tensors)
    assert json.loads(metadata[ADAPTER_METADATA])["unet.alpha_pattern"]  # the alphas differ per module

    for mine, reference in zip(outputs(tiny_sd1_dir, there, "diffusers"), outputs(tiny_sd1_dir, source, "exact")):
        torch.testing.assert_close(mine, reference, atol=1e-5, rtol=1e-5)


def test_fused_modules_split_into_their_layers_and_join_again(tiny_flux_dir: Path, tmp_path: Path) -> None:
    from trainers.models import load_model

    source = tiny_lora(tiny_flux_dir, tmp_path / "flux.safetensors", conv=False, alphas=True)
    there, back = _round_trip(source, tiny_flux_dir, "diffusers", tmp_path)
    original, again = read_lora_file(source)[0], read_lora_file(back)[0]
    assert original.keys() == again.keys() and all(torch.equal(original[k], again[k]) for k in original)
    # each layer's change is the one the family's own pipeline conversion gives (alpha applied)
    model = load_model(str(tiny_flux_dir), "auto", torch.float32)
    reference = model.family.lora_for_pipeline({k: v.float() for k, v in original.items()}, model)
    tensors, metadata = read_lora_file(there)
    patterns = json.loads(metadata[ADAPTER_METADATA])
    qkv = "transformer.single_transformer_blocks.0.attn.to_k"
    assert f"{qkv}.lora_A.weight" in tensors and f"{qkv}.lora_B.weight" in tensors
    for key in [k for k in tensors if k.endswith(".lora_A.weight")]:
        layer = key.removesuffix(".lora_A.weight")
        component, _, path = layer.partition(".")
        alpha = next((v for p, v in patterns.get(f"{component}.alpha_pattern", {}).items()
                      if path.endswith(p.replace("\\", ""))), patterns[f"{component}.lora_alpha"])
        mine = tensors[f"{layer}.lora_B.weight"] @ tensors[key] * (alpha / tensors[key].shape[0])
        ours = layer.replace(".text_model.", ".", 1)  # the pipeline names transformers 5's modules
        theirs = reference[f"{ours}.lora_B.weight"] @ reference[f"{ours}.lora_A.weight"]
        torch.testing.assert_close(mine, theirs, atol=1e-6, rtol=1e-5)


def test_comfyui_names_are_the_original_layout_and_convert_back(tiny_sdxl_dir: Path, tmp_path: Path) -> None:
    source = tiny_lora(tiny_sdxl_dir, tmp_path / "xl.safetensors")
    there, back = _round_trip(source, tiny_sdxl_dir, "comfyui", tmp_path)
    names = set(read_lora_file(there)[0])
    assert "diffusion_model.input_blocks.4.1.transformer_blocks.0.attn1.to_q.lora_down.weight" in names
    assert "text_encoders.clip_g.transformer.text_model.encoder.layers.1.mlp.fc1.alpha" in names
    assert any(n.startswith("text_encoders.clip_l.transformer.text_model.") for n in names)
    original, again = read_lora_file(source)[0], read_lora_file(back)[0]
    assert original.keys() == again.keys() and all(torch.equal(original[k], again[k]) for k in original)


def test_precision_only_and_a_lora_of_another_model_refused(tiny_sd1_dir: Path, tiny_sdxl_dir: Path,
                                                            tmp_path: Path) -> None:
    source = tiny_lora(tiny_sd1_dir, tmp_path / "lora.safetensors", conv=False)
    half = run("convert", tmp_path / "half", input=str(source), to="same", save_precision="fp16")
    tensors, metadata = read_lora_file(half)
    assert {t.dtype for t in tensors.values()} == {torch.float16}
    assert metadata["ss_network_dim"] == "4" and metadata["sshs_model_hash"] != read_lora_file(source)[1][
        "sshs_model_hash"]
    with pytest.raises(ToolError, match=r"input: \d+ of its modules name no layer of the model .*another family"):
        run("convert", tmp_path / "bad", input=str(source), to="comfyui", model=str(tiny_sdxl_dir))


def test_a_model_folder_becomes_a_single_file_in_fp16(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    from safetensors import safe_open

    out = run("convert", tmp_path / "job", input=str(tiny_sd1_dir), to="single_file", save_precision="fp16")
    assert out.suffix == ".safetensors" and out.name == f"{tiny_sd1_dir.name}-fp16.safetensors"
    with safe_open(str(out), framework="pt") as handle:
        keys = list(handle.keys())
        assert {handle.get_slice(k).get_dtype() for k in keys} - {"I64"} == {"F16"}  # but CLIP's position ids
    assert "model.diffusion_model.input_blocks.1.1.proj_in.weight" in keys
    assert any(k.startswith("cond_stage_model.transformer.text_model.") for k in keys)
