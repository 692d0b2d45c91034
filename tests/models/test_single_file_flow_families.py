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


@pytest.fixture(scope="module")
def zimage_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A tiny Z-Image folder, and the same model as ComfyUI's split files (diffusion_models/, text_encoders/, vae/)
    with its tokenizer where a first run leaves it in tokenizer_cache_dir."""
    from trainers.models.tiny_flow import write_reference_files
    from trainers.models.zimage.tiny import build_tiny_zimage

    root = tmp_path_factory.mktemp("zimage split files")
    folder = build_tiny_zimage(root / "model")
    return folder, {name: str(path) for name, path in write_reference_files(folder, root / "files").items()}


def _render(model: object) -> torch.Tensor:
    family = model.family  # type: ignore[attr-defined]
    pipe = family.build_pipeline(model, family.inference_scheduler(model, "euler"))
    return pipe("sks shape, red circle", num_inference_steps=2, height=64, width=64, output_type="pt",
                generator=torch.Generator().manual_seed(0)).images


@pytest.mark.slow  # builds, saves and loads the tiny model twice
def test_zimage_from_comfyuis_split_files_renders_as_its_diffusers_folder(zimage_files: tuple[Path, dict[str, str]]
                                                                          ) -> None:
    from diffusers.loaders.single_file_utils import convert_z_image_transformer_checkpoint_to_diffusers
    from safetensors import safe_open
    from safetensors.torch import load_file

    from trainers.models import ModelFiles

    folder, files = zimage_files
    files = dict(files)
    model_file = files.pop("pretrained_model_name_or_path")
    assert _issues(Path(model_file), **files) == []  # Validate takes them
    with safe_open(model_file, "pt") as fh:
        keys = set(fh.keys())
    assert {"x_embedder.weight", "cap_pad_token", "layers.0.attention.qkv.weight", "layers.1.attention.out.weight",
            "final_layer.adaLN_modulation.1.weight", "noise_refiner.0.adaLN_modulation.0.weight"} <= keys
    diffusers_state = load_file(folder / "transformer" / "diffusion_pytorch_model.safetensors")
    converted = convert_z_image_transformer_checkpoint_to_diffusers(load_file(model_file))  # diffusers reads ours
    assert converted.keys() == diffusers_state.keys()
    assert all(torch.equal(converted[k], diffusers_state[k]) for k in diffusers_state)

    single = load_model(model_file, "auto", torch.float32, files=ModelFiles.from_values(files))
    assert single.family.name == "zimage" and type(single.text_encoders[0]).__name__ == "Qwen3Model"
    assert torch.allclose(_render(single), _render(load_model(str(folder), "auto", torch.float32)), atol=1e-4)


@pytest.mark.slow
def test_zimage_file_refusals_are_named_before_anything_is_written(zimage_files: tuple[Path, dict[str, str]],
                                                                   tmp_path: Path) -> None:
    _, files = zimage_files
    model_file = Path(files["pretrained_model_name_or_path"])
    (missing,) = _issues(model_file, ae=files["ae"])
    assert missing.field == "text_encoder" and "Z-Image" in missing.message and "Qwen3 text encoder" in missing.message
    (other,) = [i for i in _issues(model_file, ae=files["ae"], text_encoder=files["text_encoder"],
                                   model_family="lumina2") if i.field == "model_family"]
    assert "Z-Image" in other.message
    cut = tmp_path / "qwen_3_4b.safetensors"
    cut.write_bytes(Path(files["text_encoder"]).read_bytes()[:50])
    (truncated,) = _issues(model_file, ae=files["ae"], text_encoder=str(cut))
    assert truncated.field == "text_encoder" and "qwen_3_4b.safetensors is not a .safetensors file" in truncated.message
    (wrong,) = _issues(model_file, ae=files["ae"], text_encoder=files["ae"])  # the autoencoder given for it
    assert wrong.field == "text_encoder" and "language-model text encoder" in wrong.message
    out = tmp_path / "out"
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=str(model_file), ae=files["ae"],
                 train_data_dir=str(tmp_path), output_dir=str(out), max_train_steps=1) != 0
    assert not out.exists() or not any(out.iterdir())
