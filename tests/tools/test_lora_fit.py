"""A LoRA whose module names match the model but whose shapes do not (an SD2 LoRA on an SD1 model) is refused before
anything is written, by merge, convert and Generate, naming the first module that does not fit and the family the
LoRA looks like; a module whose own up and down do not fit is named by every tool."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lora_samples import LINEAR, digest, module, run, sample_modules, tiny_lora, write

from trainers.core.errors import ToolError
from trainers.loras.lora_fit import misfit_for_generate
from trainers.loras.lora_state import LowRankModule
from trainers.methods.lora.file_format import read_lora_file, save_lora_file

WIDER = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn2_to_k"  # reads the text width


def _sd2_like(tiny_sd1_dir: Path, tmp_path: Path) -> Path:
    """The tiny model's LoRA with its cross-attention reading a wider text (as SD2's 1024 against SD1's 768)."""
    lora = tiny_lora(tiny_sd1_dir, tmp_path / "plain.safetensors", conv=False)
    tensors, metadata = read_lora_file(lora)
    down = tensors[f"{WIDER}.lora_down.weight"]
    tensors[f"{WIDER}.lora_down.weight"] = torch.randn(down.shape[0], down.shape[1] * 2)
    metadata["ss_base_model_version"] = "sd_v2"
    path = tmp_path / "sd2 style.safetensors"
    save_lora_file(path, tensors, metadata)
    return path


def test_merge_refuses_a_lora_of_other_shapes_naming_the_module_and_family(tiny_sd1_dir: Path,
                                                                           tmp_path: Path) -> None:
    lora = _sd2_like(tiny_sd1_dir, tmp_path)
    before = digest(lora)
    with pytest.raises(ToolError, match=rf"loras: sd2 style.safetensors: module {WIDER} changes a 32 x 64 weight, "
                                        r"but that layer of this SD1.x model is 32 x 32; it looks like a LoRA for "
                                        r"SD2.x \(its metadata: ss_base_model_version = sd_v2\)"):
        run("merge", tmp_path / "job", model=str(tiny_sd1_dir), loras=[str(lora)], device="cpu")
    assert digest(lora) == before and not any((tmp_path / "job").glob("*merged*"))


def test_convert_refuses_it_too(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    lora = _sd2_like(tiny_sd1_dir, tmp_path)
    with pytest.raises(ToolError, match=rf"input: sd2 style.safetensors: module {WIDER} changes a 32 x 64 weight.*"
                                        "SD2.x"):
        run("convert", tmp_path / "job", input=str(lora), to="diffusers", model=str(tiny_sd1_dir))
    assert not any((tmp_path / "job").glob("*.safetensors"))


def test_generate_names_the_module_before_diffusers_fails(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from trainers.models import load_model

    model = load_model(str(tiny_sd1_dir), "auto", torch.float32)
    lora = _sd2_like(tiny_sd1_dir, tmp_path)
    text = misfit_for_generate(str(lora), load_file(lora), model)
    assert text is not None and f"module {WIDER} changes a 32 x 64 weight" in text and "SD2.x" in text
    plain = tmp_path / "plain.safetensors"
    assert misfit_for_generate(str(plain), load_file(plain), model) is None


def test_a_module_whose_up_and_down_do_not_fit_is_named(tmp_path: Path) -> None:
    modules = sample_modules()
    good = modules[LINEAR]
    modules[LINEAR] = LowRankModule(good.down, module(32, (32,), 2, 2.0, 9).up, good.alpha)  # rank 4 down, 2 up
    path = write(tmp_path / "damaged.safetensors", modules)
    with pytest.raises(ToolError, match=rf"lora: .*damaged.safetensors: module {LINEAR} does not fit together: its "
                                        r"lora_down is \(4, 32\) \(rank 4\) and its lora_up \(32, 2\)"):
        run("resize", tmp_path / "job", lora=str(path), new_rank=2, device="cpu")
