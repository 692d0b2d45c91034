"""The tools on the LoRA files Lumina 2, Krea 2, Qwen-Image 2.1 and ERNIE-Image runs save (their own naming,
ModelFamily.lora_file: `diffusion_model.<reference path>` with lora_A/lora_B, or diffusers' paths with kohya's
weights): inspect names the family and says diffusers and ComfyUI load every key; resize, merge and convert write the
same naming back, which plain diffusers' load_lora_weights still loads with each module's change."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lora_samples import run
from torch import nn

from trainers.methods.lora.file_format import read_lora_file, save_lora_file
from tests.models.lora_networks import random_network
from trainers.core.errors import ToolError
from trainers.models import family as family_named


def _lumina2() -> nn.Module:
    from diffusers import Lumina2Transformer2DModel

    return Lumina2Transformer2DModel(sample_size=16, patch_size=2, in_channels=4, hidden_size=48, num_layers=1,
                                     num_refiner_layers=1, num_attention_heads=2, num_kv_heads=1, multiple_of=16,
                                     axes_dim_rope=(8, 8, 8), axes_lens=(300, 64, 64), cap_feat_dim=32)


def _builder(name: str):  # noqa: ANN202 - a function building the family's tiny transformer
    from trainers.models.ernie_image.tiny import tiny_ernie_transformer
    from trainers.models.krea2.tiny import tiny_krea2_transformer
    from trainers.models.qwen_image21.tiny import tiny_qwen21_transformer

    return {"lumina2": _lumina2, "krea2": tiny_krea2_transformer, "qwen_image21": tiny_qwen21_transformer,
            "ernie_image": tiny_ernie_transformer}[name]


PIPELINES = {"lumina2": "Lumina2Pipeline", "krea2": "Krea2Pipeline", "qwen_image21": "QwenImage21Pipeline",
             "ernie_image": "ErnieImagePipeline"}


def _saved(name: str, folder: Path, metadata: bool = True, unet: nn.Module | None = None) -> SimpleNamespace:
    """A trained network's file as the trainer saves it (its family's naming and LoRA metadata; rank 4, alpha 2)."""
    family = family_named(name)
    torch.manual_seed(0)
    unet = (unet or _builder(name)()).eval()
    _, _, state = random_network(family, unet)
    model = SimpleNamespace(unet=unet, text_encoders=[], family=family)
    told = {k: str(v) for k, v in family.lora_metadata(False).items() if v is not None} if metadata else {}
    path = folder / f"{name} lora.safetensors"
    save_lora_file(path, family.lora_file(state, model), {**told, "ss_network_dim": "4", "ss_network_alpha": "2"})
    return SimpleNamespace(family=family, unet=unet, path=path)


def _loaded_updates(saved: SimpleNamespace, path: Path) -> dict[str, torch.Tensor]:
    """What plain diffusers' load_lora_weights (lora_state_dict + load_lora_into_transformer) puts on each layer."""
    import diffusers

    pipeline = getattr(diffusers, PIPELINES[saved.family.name])
    unet = copy.deepcopy(saved.unet)
    state, metadata = pipeline.lora_state_dict(str(path), return_lora_metadata=True)
    pipeline.load_lora_into_transformer(state, transformer=unet, metadata=metadata)
    return {name: m.lora_B["default_0"].weight @ m.lora_A["default_0"].weight * m.scaling["default_0"]
            for name, m in unet.named_modules() if hasattr(m, "lora_A") and "default_0" in m.lora_A}


@pytest.mark.parametrize("name", ["lumina2", "krea2", "qwen_image21", "ernie_image"])
@pytest.mark.parametrize("metadata", [True, False], ids=["metadata", "keys only"])
def test_inspect_names_the_family_and_that_diffusers_and_comfyui_load_every_key(name: str, metadata: bool,
                                                                                tmp_path: Path) -> None:
    saved = _saved(name, tmp_path, metadata)
    run("inspect", tmp_path / "job", file=str(saved.path))
    data = json.loads((tmp_path / "job" / "report.json").read_text())
    assert data["family"].startswith(saved.family.title + " (")
    assert data["key_format"] == "family" and saved.family.title in data["key_naming"]
    loaders = {v["loader"]: v for v in data["loaders"]}
    assert loaders["diffusers"]["status"] == "yes" and loaders["ComfyUI"]["status"] == "yes"
    assert loaders["sd-scripts"]["status"] == "no" and "convert --to kohya" in loaders["sd-scripts"]["note"]
    markdown = (tmp_path / "job" / "report.md").read_text()
    assert f"**Family:** {saved.family.title} (" in markdown and "| diffusers | yes | 0 |" in markdown


@pytest.mark.parametrize("name", ["lumina2", "krea2", "qwen_image21", "ernie_image"])
def test_resize_and_merge_write_the_familys_naming_back(name: str, tmp_path: Path) -> None:
    saved = _saved(name, tmp_path)
    before, _ = read_lora_file(saved.path)
    resized = run("resize", tmp_path / "resize", lora=str(saved.path), new_rank=1, device="cpu")
    merged = run("merge", tmp_path / "merge", loras=[str(saved.path), str(saved.path)], device="cpu")
    for out, rank in ((resized, 1), (merged, 8)):
        tensors, metadata = read_lora_file(out)
        assert tensors.keys() == before.keys(), out.name  # the same naming, every module
        down = next(v for k, v in tensors.items() if k.endswith(("lora_A.weight", "lora_down.weight")))
        assert down.shape[0] == rank
        assert metadata["ss_base_model_version"] == saved.family.base_model_version


@pytest.mark.parametrize("name", ["krea2", "qwen_image21", "ernie_image"])
def test_diffusers_loads_a_resized_and_a_merged_file_with_each_modules_change(name: str, tmp_path: Path) -> None:
    saved = _saved(name, tmp_path)
    original = _loaded_updates(saved, saved.path)
    resized = run("resize", tmp_path / "resize", lora=str(saved.path), new_rank=4, dynamic_method="sv_ratio",
                  dynamic_param=1000.0, device="cpu")  # every singular value kept: the same changes
    merged = run("merge", tmp_path / "merge", loras=[f"{saved.path}:0.5", f"{saved.path}:1.5"], device="cpu")
    for out, factor in ((resized, 1.0), (merged, 2.0)):
        loaded = _loaded_updates(saved, out)
        assert loaded.keys() == original.keys()
        for layer, update in original.items():
            torch.testing.assert_close(loaded[layer], update * factor, atol=1e-5, rtol=1e-4)


def test_convert_writes_kohyas_names_or_keeps_the_familys(tmp_path: Path) -> None:
    saved = _saved("krea2", tmp_path)
    kohya = run("convert", tmp_path / "kohya", input=str(saved.path), to="kohya")
    tensors, _ = read_lora_file(kohya)
    assert tensors and all(k.startswith("lora_unet_") for k in tensors)
    assert tensors["lora_unet_blocks_0_attn_wq.alpha"].item() == 2.0  # the file's ss_network_alpha
    report = json.loads((tmp_path / "kohya" / "report.json").read_text())
    assert report["from"] == "family" and report["to"] == "kohya"
    same = run("convert", tmp_path / "same", input=str(saved.path), to="same")
    assert read_lora_file(same)[0].keys() == read_lora_file(saved.path)[0].keys()


@pytest.fixture(scope="module")
def krea2_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trainers.models.krea2.tiny import build_tiny_krea2

    return build_tiny_krea2(tmp_path_factory.mktemp("krea2") / "krea2 model")


def _saved_for(folder: Path, tmp_path: Path) -> SimpleNamespace:
    from diffusers import Krea2Transformer2DModel

    return _saved("krea2", tmp_path, unet=Krea2Transformer2DModel.from_pretrained(folder / "transformer"))


def test_merge_into_a_krea2_model_adds_each_modules_change(krea2_folder: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    folder = krea2_folder
    saved = _saved_for(folder, tmp_path)
    updates = _loaded_updates(saved, saved.path)
    merged = run("merge", tmp_path / "merge", loras=[f"{saved.path}:0.5"], model=str(folder), device="cpu")
    before = saved.unet.state_dict()
    after = {k: v for f in sorted((merged / "transformer").glob("*.safetensors")) for k, v in load_file(f).items()}
    assert updates
    for layer, update in updates.items():
        change = after[f"{layer}.weight"].float() - before[f"{layer}.weight"].float()
        torch.testing.assert_close(change, update * 0.5, atol=1e-4, rtol=1e-3)


def test_against_a_krea2_model_inspect_finds_every_layer_and_convert_renames_or_refuses(krea2_folder: Path,
                                                                                      tmp_path: Path) -> None:
    saved = _saved_for(krea2_folder, tmp_path)
    run("inspect", tmp_path / "inspect", file=str(saved.path), model=str(krea2_folder))
    check = json.loads((tmp_path / "inspect" / "report.json").read_text())["model_check"]
    assert check["family"] == "Krea 2" and check["unknown_modules"] == []
    peft = run("convert", tmp_path / "diffusers", input=str(saved.path), to="diffusers", model=str(krea2_folder))
    assert all(k.startswith("transformer.") for k in read_lora_file(peft)[0])
    original, loaded = _loaded_updates(saved, saved.path), _loaded_updates(saved, peft)
    assert loaded.keys() == original.keys()
    assert all(torch.allclose(loaded[k], v, atol=1e-5) for k, v in original.items())
    with pytest.raises(ToolError) as refused:  # named, not a traceback
        run("convert", tmp_path / "comfyui", input=str(saved.path), to="comfyui", model=str(krea2_folder))
    assert refused.value.option == "to" and "to = same" in str(refused.value)
