"""The memory estimate of layer offload for full finetunes and for UNets."""
from __future__ import annotations

from pathlib import Path

import pytest

from trainers.core.options import TrainConfig
from trainers.memory_estimate import estimate_memory, memory_report, model_size, published_size


def test_a_finetune_with_half_its_blocks_offloaded_keeps_their_weights_gradients_and_states_in_host_ram() -> None:
    values = {"model_family": "sdxl", "resolution": "1024", "mixed_precision": "bf16", "optimizer_type": "AdamW",
              "gradient_checkpointing": True}
    plain = estimate_memory(TrainConfig("finetune", values))
    half = estimate_memory(TrainConfig("finetune", {**values, "layer_offload_fraction": 0.5}))
    params = published_size("sdxl").denoiser
    assert half.gpu["optimizer states"] == pytest.approx(plain.gpu["optimizer states"] / 2)
    # fp32 weights and gradients (4 + 4 bytes) and AdamW's two moments (8 bytes) of half the UNet
    assert half.host["offloaded blocks, gradients and optimizer states"] == pytest.approx(params * 16 / 2 / 1e9)
    # the blocks in flight (2 of SDXL's 7 down, mid and up blocks) stay counted on the GPU
    assert half.gpu["denoiser weights"] == pytest.approx(plain.gpu["denoiser weights"] * (0.5 + 2 / 7))
    assert half.gpu_gb < plain.gpu_gb - 10


def test_an_sdxl_finetune_over_the_card_is_told_the_offload_that_fits() -> None:
    cfg = TrainConfig("finetune", {"model_family": "sdxl", "resolution": "1024", "mixed_precision": "bf16",
                                   "optimizer_type": "AdamW", "gradient_checkpointing": True})
    _, warnings = memory_report(cfg, card_gb=40)
    assert warnings and "offload" in warnings[0] and "int8" not in warnings[0], warnings


def test_a_unet_folder_counts_its_down_mid_and_up_blocks(tiny_sd1_dir: Path) -> None:
    from diffusers import UNet2DConditionModel

    unet = UNet2DConditionModel.from_pretrained(tiny_sd1_dir / "unet")
    size = model_size(TrainConfig("lora", {"pretrained_model_name_or_path": str(tiny_sd1_dir)}))
    assert size.swap_units == len(unet.down_blocks) + 1 + len(unet.up_blocks)
