"""Qwen-Image and Lumina 2 as single files: a finetune's file in the layout ComfyUI and sd-scripts/musubi-tuner read
(Lumina 2's checked against diffusers' own converter at real widths), each file told apart by its keys, and what
cannot be trained from (these files, a family mismatch, a cut file) named before anything is written."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import train
from safetensors.torch import save_file

from trainers.core.options import BY_NAME
from trainers.models import load_model
from trainers.models.checks import model_issues
from trainers.models.lumina2.tiny import build_tiny_lumina2
from trainers.models.qwen_image.tiny import build_tiny_qwen_image
from trainers.models.single_file.save import single_file_state_dict

BUILDERS = {"qwen_image": build_tiny_qwen_image, "lumina2": build_tiny_lumina2}
# keys ComfyUI's model detection reads (comfy/model_detection.py) and the tensors around them
KEYS = {"qwen_image": ("txt_norm.weight", "img_in.weight", "transformer_blocks.0.attn.to_q.weight",
                       "transformer_blocks.1.img_mlp.net.0.proj.weight"),
        "lumina2": ("cap_embedder.1.weight", "x_embedder.weight", "layers.0.attention.qkv.weight",
                    "context_refiner.0.attention_norm1.weight", "noise_refiner.0.adaLN_modulation.1.bias",
                    "final_layer.linear.weight", "norm_final.weight")}
TITLES = {"qwen_image": "Qwen-Image", "lumina2": "Lumina 2"}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each family's tiny model saved as a single file (what a finetune with save_model_as = 'both' writes)."""
    root = tmp_path_factory.mktemp("flow single files")
    out = {}
    for name, build in BUILDERS.items():
        model = load_model(str(build(root / name)), "auto", torch.float32)
        out[name] = root / f"{name}.safetensors"
        save_file(single_file_state_dict(model, torch.float32), out[name])
    return out


def _issues(path: Path, **values: object) -> list:
    return model_issues({**{n: o.default for n, o in BY_NAME.items()}, "pretrained_model_name_or_path": str(path),
                         **values})


@pytest.mark.slow  # a real-size transformer (no weights) takes seconds to build
def test_lumina2_reference_layout_matches_diffusers_converter_at_real_widths() -> None:
    from accelerate import init_empty_weights
    from diffusers import Lumina2Transformer2DModel
    from diffusers.loaders.single_file_utils import convert_lumina2_to_diffusers

    from trainers.models.lumina2.reference import to_reference

    with init_empty_weights():
        transformer = Lumina2Transformer2DModel()  # Lumina-Image-2.0's published config (q 2304, k and v 768 wide)
    state = transformer.state_dict()
    back = convert_lumina2_to_diffusers(to_reference(state, transformer.config))
    assert back.keys() == state.keys()
    assert all(back[k].shape == state[k].shape for k in state)


@pytest.mark.slow  # builds and saves the tiny models
@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_the_single_file_has_comfyuis_names_and_is_told_apart_by_them(files: dict[str, Path], family: str) -> None:
    from safetensors import safe_open

    with safe_open(str(files[family]), "pt") as fh:
        keys = set(fh.keys())
    assert set(KEYS[family]) <= keys
    (issue,) = _issues(files[family])  # read as its family, which is only trained from diffusers folders yet
    assert issue.field == "pretrained_model_name_or_path" and TITLES[family] in issue.message
    assert "diffusers folder" in issue.message


@pytest.mark.slow
@pytest.mark.parametrize("family, other", [("qwen_image", "lumina2"), ("lumina2", "qwen_image"),
                                           ("lumina2", "flux")])
def test_a_file_of_another_family_is_named(files: dict[str, Path], family: str, other: str) -> None:
    mismatch = [i for i in _issues(files[family], model_family=other) if i.field == "model_family"]
    assert mismatch and TITLES[family] in mismatch[0].message


@pytest.mark.slow
def test_a_cut_file_is_named_and_nothing_is_written(files: dict[str, Path], tmp_path: Path) -> None:
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(files["qwen_image"].read_bytes()[:50])
    (issue,) = _issues(cut)
    assert issue.field == "pretrained_model_name_or_path" and "header" in issue.message
    out = tmp_path / "out"
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=str(cut), train_data_dir=str(tmp_path),
                 output_dir=str(out), max_train_steps=1) != 0
    assert not out.exists() or not any(out.iterdir())
