"""Qwen-Image, Lumina 2 and Z-Image as single files: a finetune's file in the layout ComfyUI and sd-scripts/musubi-tuner
read (checked against diffusers' own converters), each file told apart by its keys; Z-Image, Lumina 2 and Qwen-Image
trained from ComfyUI's split files (diffusion_models, text_encoders, vae) as from their diffusers folders; and what
cannot be trained from (a family mismatch, a missing, cut or wrong file) named before anything is written."""
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
TITLES = {"qwen_image": "Qwen-Image", "lumina2": "Lumina 2", "zimage": "Z-Image"}


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
    issues = _issues(files[family])  # read as its family, which asks for its other split files
    assert all(TITLES[family] in issue.message for issue in issues)
    assert [issue.field for issue in issues] == ["text_encoder", "ae"]


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



# the families read from ComfyUI's split files: their tiny builder (and its options), keys of their diffusion_models
# file, text encoder
SPLIT = {"zimage": ("trainers.models.zimage.tiny", "build_tiny_zimage", "Qwen3Model", "Qwen3 text encoder",
                    {"x_embedder.weight", "cap_pad_token", "layers.0.attention.qkv.weight",
                     "layers.1.attention.out.weight", "final_layer.adaLN_modulation.1.weight",
                     "noise_refiner.0.adaLN_modulation.0.weight"}, {}),
         "lumina2": ("trainers.models.lumina2.tiny", "build_tiny_lumina2", "Gemma2Model", "Gemma 2 text encoder",
                     set(KEYS["lumina2"]), {}),
         # heads as wide as the published ones and Qwen-Image's 16 latent channels: the head counts and the latent
         # statistics are not in the files
         "qwen_image": ("trainers.models.qwen_image.tiny", "build_tiny_qwen_image",
                        "Qwen2_5_VLForConditionalGeneration", "Qwen2.5-VL text encoder", set(KEYS["qwen_image"]),
                        {"reference_sizes": True})}


@pytest.fixture(scope="module", params=sorted(SPLIT))
def split_files(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                ) -> tuple[str, Path, dict[str, str]]:
    """A tiny folder of the family, and the same model as ComfyUI's split files (diffusion_models/, text_encoders/,
    vae/) with its tokenizer where a first run leaves it in tokenizer_cache_dir."""
    import importlib

    from trainers.models.tiny_flow import write_reference_files

    module, builder, *_, options = SPLIT[request.param]
    root = tmp_path_factory.mktemp(f"{request.param} split files")
    folder = getattr(importlib.import_module(module), builder)(root / "model", **options)
    files = {name: str(path) for name, path in write_reference_files(folder, root / "files").items()}
    return request.param, folder, files


def _render(model: object) -> torch.Tensor:
    family = model.family  # type: ignore[attr-defined]
    pipe = family.build_pipeline(model, family.inference_scheduler(model, "euler"))
    return pipe("sks shape, red circle", num_inference_steps=2, height=64, width=64, output_type="pt",
                generator=torch.Generator().manual_seed(0)).images


@pytest.mark.slow  # builds, saves and loads the tiny model twice
def test_comfyuis_split_files_render_as_the_diffusers_folder(split_files: tuple[str, Path, dict[str, str]]) -> None:
    from safetensors import safe_open

    from trainers.models import ModelFiles

    family, folder, files = split_files
    files = dict(files)
    model_file = files.pop("pretrained_model_name_or_path")
    assert _issues(Path(model_file), **files) == []  # Validate takes them
    with safe_open(model_file, "pt") as fh:
        assert SPLIT[family][4] <= set(fh.keys())
    single = load_model(model_file, "auto", torch.float32, files=ModelFiles.from_values(files))
    assert single.family.name == family and type(single.text_encoders[0]).__name__ == SPLIT[family][2]
    assert torch.allclose(_render(single), _render(load_model(str(folder), "auto", torch.float32)), atol=1e-4)


def _wan_names(state: dict[str, torch.Tensor], resnets: int) -> dict[str, torch.Tensor]:
    """An AutoencoderKLQwenImage's tensors under Wan's original names, as ComfyUI's qwen_image_vae file holds them
    (musubi-tuner's convert_comfyui_state_dict lists the pairs): a residual block's layers by their index in its
    Sequential, the decoder's blocks as one flat list (`resnets` residual blocks, then the upsampler, each stage)."""
    import re

    layers = {"norm1": "residual.0", "conv1": "residual.2", "norm2": "residual.3", "conv2": "residual.6",
              "conv_shortcut": "shortcut"}
    stages = [(r"((?:resnets|down_blocks)\.\d+)\.(\w+)\.", lambda m: f"{m[1]}.{layers.get(m[2], m[2])}."),
              (r"decoder\.up_blocks\.(\d+)\.(resnets|upsamplers)\.(\d+)\.", lambda m: "decoder.upsamples."
               f"{int(m[1]) * (resnets + 1) + (int(m[3]) if m[2] == 'resnets' else resnets)}."),
              (r"mid_block\.resnets\.0\.", "middle.0."), (r"mid_block\.attentions\.0\.", "middle.1."),
              (r"mid_block\.resnets\.1\.", "middle.2."), (r"encoder\.down_blocks\.", "encoder.downsamples."),
              (r"^(encoder|decoder)\.conv_in\.", r"\1.conv1."), (r"^(encoder|decoder)\.norm_out\.", r"\1.head.0."),
              (r"^(encoder|decoder)\.conv_out\.", r"\1.head.2."), (r"^quant_conv\.", "conv1."),
              (r"^post_quant_conv\.", "conv2.")]
    out = {}
    for key, value in state.items():
        for pattern, repl in stages:
            key = re.sub(pattern, repl, key)
        out[key] = value
    return out


@pytest.mark.slow
@pytest.mark.parametrize("split_files", ["qwen_image"], indirect=True)
def test_comfyuis_qwen_image_vae_in_wans_layout_is_read(split_files: tuple[str, Path, dict[str, str]],
                                                        tmp_path: Path) -> None:
    """ComfyUI's vae/qwen_image_vae.safetensors names the autoencoder as Wan's code does (encoder.conv1,
    decoder.upsamples.N, conv1/conv2): read as the diffusers-layout file is, and rendering the same."""
    from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers
    from safetensors.torch import load_file

    from trainers.models import ModelFiles

    _, folder, files = split_files
    state = load_file(files["ae"])
    comfy = _wan_names(state, resnets=3)  # Qwen-Image's: two residual blocks a stage (+1 in the decoder)
    assert {"encoder.conv1.weight", "conv2.weight", "decoder.upsamples.3.resample.1.weight",
            "encoder.downsamples.0.residual.2.weight"} <= comfy.keys()
    assert convert_wan_vae_to_diffusers(comfy).keys() == state.keys()  # diffusers' own reading of those names
    wan = tmp_path / "qwen_image_vae.safetensors"
    save_file(comfy, wan)
    options = {**files, "ae": str(wan)}
    model_file = Path(options.pop("pretrained_model_name_or_path"))
    assert _issues(model_file, **options) == []
    single = load_model(str(model_file), "auto", torch.float32, files=ModelFiles.from_values(options))
    assert torch.equal(_render(single), _render(load_model(str(folder), "auto", torch.float32)))


@pytest.mark.slow
@pytest.mark.parametrize("split_files", ["zimage"], indirect=True)  # Lumina 2's: at real widths above
def test_zimage_file_is_read_by_diffusers_converter_as_its_folder(split_files: tuple[str, Path, dict[str, str]]
                                                                  ) -> None:
    from diffusers.loaders.single_file_utils import convert_z_image_transformer_checkpoint_to_diffusers
    from safetensors.torch import load_file

    _, folder, files = split_files
    expected = load_file(folder / "transformer" / "diffusion_pytorch_model.safetensors")
    converted = convert_z_image_transformer_checkpoint_to_diffusers(load_file(files["pretrained_model_name_or_path"]))
    assert converted.keys() == expected.keys() and all(torch.equal(converted[k], expected[k]) for k in expected)


@pytest.mark.slow
def test_split_file_refusals_are_named_before_anything_is_written(split_files: tuple[str, Path, dict[str, str]],
                                                                  tmp_path: Path) -> None:
    family, _, files = split_files
    title, what = TITLES[family], SPLIT[family][3]
    model_file = Path(files["pretrained_model_name_or_path"])
    (missing,) = _issues(model_file, ae=files["ae"])
    assert missing.field == "text_encoder" and title in missing.message and what in missing.message
    other_family = "qwen_image" if family == "lumina2" else "lumina2"
    (other,) = [i for i in _issues(model_file, ae=files["ae"], text_encoder=files["text_encoder"],
                                   model_family=other_family) if i.field == "model_family"]
    assert title in other.message
    cut = tmp_path / "text_encoder.safetensors"
    cut.write_bytes(Path(files["text_encoder"]).read_bytes()[:50])
    (truncated,) = _issues(model_file, ae=files["ae"], text_encoder=str(cut))
    assert truncated.field == "text_encoder" and f"{cut.name} is not a .safetensors file" in truncated.message
    (wrong,) = _issues(model_file, ae=files["ae"], text_encoder=files["ae"])  # the autoencoder given for it
    assert wrong.field == "text_encoder" and "language-model text encoder" in wrong.message
    out = tmp_path / "out"
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=str(model_file), ae=files["ae"],
                 train_data_dir=str(tmp_path), output_dir=str(out), max_train_steps=1) != 0
    assert not out.exists() or not any(out.iterdir())
