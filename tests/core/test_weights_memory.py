"""Validate's line on GPU memory for the weights: parameter counts from safetensors headers, bytes as the trainer
holds each part."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch

from trainers.core.options import TrainConfig
from trainers.core.weights_memory import model_parts, weights_note


def _header_only(path: Path, shapes: dict[str, tuple[int, ...]]) -> Path:
    """A safetensors header naming tensors of these shapes, without their data (what Validate reads)."""
    header = json.dumps({k: {"dtype": "BF16", "shape": list(s), "data_offsets": [0, 0]} for k, s in shapes.items()})
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode())
    return path


def test_a_diffusers_folder_counts_as_its_modules(tiny_sd1_dir: Path) -> None:
    from trainers.models import load_model

    model = load_model(str(tiny_sd1_dir), "auto", torch.float32)
    count = {kind: sum(p.numel() for p in module.parameters())
             for kind, module in (("denoiser", model.unet), ("vae", model.vae), ("text_encoder", model.text_encoders[0]))}
    parts = model_parts({"pretrained_model_name_or_path": str(tiny_sd1_dir)})
    assert {p.kind: p.params for p in parts} == count


def test_flux_dev_as_sd_scripts_files_needs_what_24_gb_cards_know(tmp_path: Path) -> None:
    """FLUX.1-dev's 11.9 B transformer: 23.8 GB in bf16, 11.9 GB with fp8_base; T5-XXL and CLIP-L until cached."""
    from accelerate import init_empty_weights
    from diffusers import FluxTransformer2DModel

    from trainers.models.flux.reference import to_reference

    config = {"in_channels": 64, "num_layers": 19, "num_single_layers": 38, "attention_head_dim": 128,
              "num_attention_heads": 24, "joint_attention_dim": 4096, "pooled_projection_dim": 768,
              "guidance_embeds": True, "axes_dims_rope": (16, 56, 56)}
    with init_empty_weights():
        transformer = FluxTransformer2DModel(**config)
    shapes = {k: tuple(v.shape) for k, v in to_reference(transformer.state_dict(), transformer.config).items()}
    files = {"pretrained_model_name_or_path": _header_only(tmp_path / "flux1-dev.safetensors", shapes),
             "t5xxl": _header_only(tmp_path / "t5.safetensors", {"shared.weight": (32128, 4096),
                                                                 "encoder.block": (4_700_000_000,)}),
             "clip_l": _header_only(tmp_path / "clip_l.safetensors", {"text_model.w": (123_000_000,)}),
             "ae": _header_only(tmp_path / "ae.safetensors", {"encoder.w": (83_800_000,)})}
    values = {k: str(v) for k, v in files.items()}
    note = weights_note(TrainConfig("lora", {**values, "mixed_precision": "bf16", "cache_text_encoder_outputs": True,
                                             "network_train_unet_only": True}))
    assert note.startswith("GPU memory for the weights: denoiser 23.8 GB (bf16; 11.9 GB with fp8_base), text "
                           "encoders 9.9 GB until their outputs are cached, VAE 0.2 GB."), note
    fp8 = weights_note(TrainConfig("lora", {**values, "mixed_precision": "bf16", "fp8_base": True}))
    assert "denoiser 11.9 GB (fp8_base)" in fp8 and "until" not in fp8
    full = weights_note(TrainConfig("finetune", {**values, "mixed_precision": "bf16", "optimizer_type": "AdamW8bit"}))
    assert "denoiser 95.2 GB trained (weights and gradients in float32) + 23.8 GB of optimizer states" in full


def test_a_model_that_is_not_here_gets_no_line() -> None:
    assert weights_note(TrainConfig("lora", {"pretrained_model_name_or_path": "some/hub-model"})) == ""


@pytest.mark.parametrize("method", ["lora", "finetune"])
def test_validate_shows_it(tiny_sd1_dir: Path, tmp_path: Path, method: str) -> None:
    from gui.checks import check_form

    from trainers.demo import build_dataset

    report = check_form(method, {"pretrained_model_name_or_path": str(tiny_sd1_dir),
                                 "train_data_dir": str(build_dataset(tmp_path / "data")),
                                 "output_dir": str(tmp_path / "out"), "resolution": "64"})
    assert "**Memory** Estimated peak GPU memory" in report.summary()  # trainers/memory_estimate.py
    assert "denoiser weights 0.00" in report.memory and "from the model's files" in report.memory
