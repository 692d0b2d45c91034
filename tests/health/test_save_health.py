"""The save health check catches each failure mode by name: a zeroed LoRA, renamed keys, a NaN tensor, no effect."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file

from trainers.core.events import TRAINING_EVENTS, Health
from trainers.health.check import HEALTHY, WARNINGS, check_save
from trainers.health.effect import BARELY, difference
from trainers.health.report import report_path, write_report

MODULES = ("lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q",
           "lora_unet_up_blocks_1_attentions_0_transformer_blocks_0_attn2_to_k")


def _lora(path: Path, up: float | None = None, nan: bool = False, rename: bool = False) -> Path:
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for name in MODULES:
        key = name.replace("lora_unet_", "mystery_net.") if rename else name
        tensors[f"{key}.lora_down.weight"] = torch.randn(4, 32, generator=g)
        tensors[f"{key}.lora_up.weight"] = torch.full((32, 4), up) if up is not None else torch.randn(32, 4, generator=g)
        tensors[f"{key}.alpha"] = torch.tensor(4.0)
    if nan:
        tensors[f"{MODULES[0]}.lora_up.weight"][0, 0] = float("nan")
    save_file(tensors, str(path))
    return path


def test_a_healthy_lora_passes(tmp_path: Path) -> None:
    report = check_save(_lora(tmp_path / "good.safetensors"))
    assert report["verdict"] == HEALTHY, report["warnings"]
    assert report["checks"]["weights"]["modules"] == 2
    assert report["checks"]["loading"]["loaders"]["ComfyUI"]["dropped"] == 0
    assert report["checks"]["loading"]["loaders"]["diffusers"]["dropped"] == 0


def test_a_zeroed_lora_is_flagged(tmp_path: Path) -> None:
    report = check_save(_lora(tmp_path / "zero.safetensors", up=0.0))
    assert report["verdict"] == WARNINGS
    assert any("delta is zero in all 2 modules" in w for w in report["warnings"])
    assert report["checks"]["weights"]["still_count"] == 2


def test_renamed_keys_are_flagged_with_the_keys_each_loader_drops(tmp_path: Path) -> None:
    report = check_save(_lora(tmp_path / "renamed.safetensors", rename=True))
    assert report["verdict"] == WARNINGS
    loaders = report["checks"]["loading"]["loaders"]
    assert loaders["ComfyUI"]["dropped"] == 6 and loaders["diffusers"]["dropped"] == 6
    assert any(w.startswith("ComfyUI would not load 6 of 6 keys") for w in report["warnings"])
    assert any(w.startswith("diffusers would not load 6 of 6 keys") for w in report["warnings"])


def test_a_nan_tensor_is_flagged(tmp_path: Path) -> None:
    report = check_save(_lora(tmp_path / "nan.safetensors", nan=True))
    assert report["verdict"] == WARNINGS
    assert report["checks"]["weights"]["nonfinite"] == [f"{MODULES[0]}.lora_up.weight"]
    assert any(w.startswith("NaN/Inf weights in 1 tensors") for w in report["warnings"])


def test_a_file_that_is_no_lora_is_a_warning_not_a_pass(tmp_path: Path) -> None:
    (tmp_path / "other.ckpt").write_bytes(b"pickle")
    report = check_save(tmp_path / "other.ckpt")
    assert report["verdict"] == WARNINGS and "nothing checked" in report["warnings"][0]
    save_file({"emb_params": torch.ones(1, 8)}, str(tmp_path / "embedding.safetensors"))
    assert check_save(tmp_path / "embedding.safetensors")["verdict"] == HEALTHY


def _image(value: np.ndarray) -> Image.Image:
    return Image.fromarray(value.astype(np.uint8))


def test_the_effect_check_flags_an_unchanged_image_and_passes_a_changed_one(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (16, 16, 3))
    _image(base).save(tmp_path / "base.png")
    _image(base).save(tmp_path / "same.png")
    _image(255 - base).save(tmp_path / "changed.png")
    lora = _lora(tmp_path / "good.safetensors")
    same = check_save(lora, base_image=tmp_path / "base.png", lora_image=tmp_path / "same.png")
    assert any(w.startswith("this LoRA barely changes the image") for w in same["warnings"])
    changed = check_save(lora, base_image=tmp_path / "base.png", lora_image=tmp_path / "changed.png")
    assert changed["verdict"] == HEALTHY and changed["checks"]["effect"]["difference"] > BARELY
    expected = float(np.abs(base.astype(np.float32) - (255 - base)).mean())
    assert abs(difference(tmp_path / "base.png", tmp_path / "changed.png") - expected) < 1e-4


def test_the_report_file_and_event(tmp_path: Path) -> None:
    lora = _lora(tmp_path / "out" / "good.safetensors") if (tmp_path / "out").mkdir() is None else None
    report = check_save(lora)
    written = write_report(tmp_path, lora, report)
    assert written == report_path(tmp_path, lora) == tmp_path / "health" / "good.safetensors.json"
    assert TRAINING_EVENTS["health"] is Health
    event = Health.from_json({"path": str(lora), "step": 3, "verdict": report["verdict"], "report": str(written)})
    assert event.warnings == [] and event.verdict == HEALTHY


def test_a_model_save_is_scanned_for_nan(tmp_path: Path) -> None:
    folder = tmp_path / "model" / "unet"
    folder.mkdir(parents=True)
    save_file({"a.weight": torch.ones(2, 2), "b.weight": torch.tensor([float("inf")])},
              str(folder / "diffusion_pytorch_model.safetensors"))
    report = check_save(tmp_path / "model")
    assert report["checks"]["weights"]["nonfinite"] == ["diffusion_pytorch_model.safetensors: b.weight"]
    assert report["verdict"] == WARNINGS
