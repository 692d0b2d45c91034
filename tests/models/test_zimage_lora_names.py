"""Z-Image LoRAs musubi-tuner wrote (attention q, k, v as three modules, `attention_to_out_0`) are read as the ComfyUI
names Atelier writes: Generate renders them as their fused twin, and network_weights starts a run from them."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import train
from PIL import Image

from trainers.demo import build_dataset
from trainers.methods.lora.file_format import read_lora_file, save_lora_file
from trainers.models.zimage.lora_names import comfy_names
from trainers.models.zimage.tiny import build_tiny_zimage

RANK, ALPHA = 2, 1.0


def _musubi_lora(model_dir: Path) -> dict[str, torch.Tensor]:
    """A random LoRA of every module musubi-tuner's lora_zimage trains, under its names."""
    from diffusers import ZImageTransformer2DModel

    transformer = ZImageTransformer2DModel.from_pretrained(model_dir, subfolder="transformer")
    generator = torch.Generator().manual_seed(0)
    state = {}
    for index, layer in enumerate(transformer.layers):
        modules = {"attention_to_q": layer.attention.to_q, "attention_to_k": layer.attention.to_k,
                   "attention_to_v": layer.attention.to_v, "attention_to_out_0": layer.attention.to_out[0],
                   **{f"feed_forward_{n}": getattr(layer.feed_forward, n) for n in ("w1", "w2", "w3")}}
        for name, linear in modules.items():
            key = f"lora_unet_layers_{index}_{name}"
            state[f"{key}.lora_down.weight"] = torch.randn(RANK, linear.in_features, generator=generator) * 0.3
            state[f"{key}.lora_up.weight"] = torch.randn(linear.out_features, RANK, generator=generator) * 0.3
            state[f"{key}.alpha"] = torch.tensor(ALPHA)
    return state


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("zimage musubi")
    model_dir = build_tiny_zimage(root / "model")
    musubi = _musubi_lora(model_dir)
    save_lora_file(root / "musubi.safetensors", musubi, {"ss_network_module": "networks.lora_zimage"})
    save_lora_file(root / "comfy.safetensors", comfy_names(musubi), {"ss_network_module": "networks.lora_zimage"})
    return {"model": model_dir, "musubi": root / "musubi.safetensors", "comfy": root / "comfy.safetensors",
            "root": root}


def test_the_split_names_become_comfyuis_fused_ones_computing_the_same() -> None:
    down = {n: torch.randn(2, 8) for n in ("q", "k", "v")}
    up = {n: torch.randn(8, 2) for n in ("q", "k", "v")}
    stem = "lora_unet_layers_0_attention"
    state = {**{f"{stem}_to_{n}.lora_down.weight": down[n] for n in down},
             **{f"{stem}_to_{n}.lora_up.weight": up[n] for n in up},
             f"{stem}_to_q.alpha": torch.tensor(1.0), f"{stem}_to_k.alpha": torch.tensor(1.0),
             f"{stem}_to_v.alpha": torch.tensor(2.0)}  # one scale apart: folded into its up
    fused = comfy_names(state)
    assert set(fused) == {f"{stem}_qkv.lora_down.weight", f"{stem}_qkv.lora_up.weight", f"{stem}_qkv.alpha"}
    x = torch.randn(3, 8)
    scale = float(fused[f"{stem}_qkv.alpha"]) / fused[f"{stem}_qkv.lora_down.weight"].shape[0]
    got = x @ fused[f"{stem}_qkv.lora_down.weight"].T @ fused[f"{stem}_qkv.lora_up.weight"].T * scale
    want = torch.cat([x @ down[n].T @ up[n].T * (2.0 if n == "v" else 1.0) / 2 for n in ("q", "k", "v")], dim=1)
    assert torch.allclose(got, want, atol=1e-5)
    assert comfy_names(fused) is fused  # ComfyUI's names are read as they are
    with pytest.raises(ValueError, match="to_k is missing"):
        comfy_names({k: v for k, v in state.items() if "_to_k." not in k})


@pytest.mark.slow  # renders with the tiny model
def test_generate_renders_a_musubi_lora_as_its_comfyui_twin(files: dict[str, Path], tmp_path: Path) -> None:
    from trainers.generate.options import GenerateConfig, LoraRef
    from trainers.generate.plan import Variant, build_plan
    from trainers.generate.renderer import Renderer

    cfg = GenerateConfig({"width": 64, "height": 64, "steps": 2, "cpu_threads": 1, "devices": "cpu",
                          "model": str(files["model"]), "prompts": ["sks shape"]})
    variants = [Variant("base"), Variant("musubi", (LoraRef(str(files["musubi"]), 1.0),)),
                Variant("comfy", (LoraRef(str(files["comfy"]), 1.0),))]
    renderer = Renderer(cfg, "cpu", variants)
    base, musubi, comfy = (np.asarray(Image.open(renderer.render(item)[0]).convert("RGB")).astype(int)
                           for item in build_plan(cfg, tmp_path / "images", 7, variants).items)
    assert np.abs(musubi - base).max() > 0
    assert np.abs(musubi - comfy).max() <= 1


@pytest.mark.slow  # a one-step run
def test_network_weights_starts_from_a_musubi_lora(files: dict[str, Path]) -> None:
    root = files["root"]
    dataset = build_dataset(root / "data", folder="1_sks shape")
    assert train("lora", root / "run", pretrained_model_name_or_path=str(files["model"]), train_data_dir=str(dataset),
                 output_dir=str(root / "out"), output_name="started", resolution="64", max_train_steps=1,
                 train_batch_size=1, max_data_loader_n_workers=0, learning_rate=1e-9, save_precision="float",
                 network_weights=str(files["musubi"]), dim_from_weights=True) == 0
    started, _ = read_lora_file(root / "out" / "started.safetensors")
    expected, _ = read_lora_file(files["comfy"])
    assert started.keys() == expected.keys()  # saved in ComfyUI's names (a 1e-9 step barely moves them)
    assert max((started[k].float() - expected[k].float()).abs().max().item() for k in expected) < 1e-6
