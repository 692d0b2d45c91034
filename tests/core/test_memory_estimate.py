"""The memory estimate before launch: what it counts, the advice when a run does not fit the card, where Validate and
--print-config show it, and (a CPU run) that it predicts the weights and optimizer states a run really holds."""
from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
import torch

from trainers import memory_estimate
from trainers.memory_estimate import (Setting, estimate_memory, fits, fitting_settings, memory_report, model_size,
                                      published_size)
from trainers.core.options import TrainConfig

FLUX_LORA = {"model_family": "flux", "resolution": "1024", "mixed_precision": "bf16", "gradient_checkpointing": True,
             "network_dim": 16, "network_train_unet_only": True, "optimizer_type": "AdamW8bit",
             "cache_text_encoder_outputs": True}


def test_flux_lora_over_a_12_gb_card_is_told_which_settings_fit() -> None:
    cfg = TrainConfig("lora", FLUX_LORA)
    line, warnings = memory_report(cfg, card_gb=12)
    assert "23.8" in line and "published FLUX.1 dev" in line  # 11.9 B parameters in bf16
    assert len(warnings) == 1 and "12 GB card" in warnings[0] and "would fit" in warnings[0]
    suggested = fitting_settings(cfg, 12)
    assert suggested and all(fits(estimate, 12) for _, estimate in suggested)
    assert any(f"{s.describe()}: ~{e.card_gb:.1f} GB" in warnings[0] for s, e in suggested)
    assert "int8 base + 50% offload" in warnings[0]  # the example: an 8-bit base, half the blocks in RAM
    assert memory_report(cfg, card_gb=48) == (line + " Fits a 48 GB card.", [])


def test_each_setting_lowers_what_it_should() -> None:
    cfg = TrainConfig("lora", FLUX_LORA)
    plain, int8, nf4 = (estimate_memory(cfg, Setting(base)) for base in ("none", "int8", "nf4"))
    half = estimate_memory(cfg, Setting("int8", 0.5))
    assert plain.gpu["denoiser weights"] == pytest.approx(23.8, abs=0.1)
    assert int8.gpu["denoiser weights"] == pytest.approx(11.9, abs=0.1)
    assert nf4.gpu["denoiser weights"] < 7.0
    assert half.gpu["denoiser weights"] < 6.7 and half.host["offloaded blocks (pinned)"] == pytest.approx(5.95, abs=0.1)
    fp8_base = estimate_memory(TrainConfig("lora", {**FLUX_LORA, "fp8_base": True}))
    assert fp8_base.setting.base == "fp8" and fp8_base.gpu["denoiser weights"] == pytest.approx(11.9, abs=0.1)
    checkpointed = estimate_memory(cfg).gpu["activations"]
    assert estimate_memory(cfg.replace(gradient_checkpointing=False)).gpu["activations"] > 5 * checkpointed
    assert estimate_memory(cfg.replace(train_batch_size=2)).gpu["activations"] == pytest.approx(2 * checkpointed)
    text = estimate_memory(cfg.replace(cache_text_encoder_outputs=False)).gpu["text encoders"]
    assert text > 9 and estimate_memory(cfg.replace(cache_text_encoder_outputs=False,
                                                    text_encoder_precision="int8")).gpu["text encoders"] < 5.5


def test_a_full_finetune_counts_gradients_and_optimizer_states() -> None:
    cfg = TrainConfig("finetune", {"model_family": "sdxl", "resolution": "1024", "mixed_precision": "bf16",
                                   "optimizer_type": "AdamW", "gradient_checkpointing": True})
    estimate = estimate_memory(cfg)
    params = published_size("sdxl").denoiser
    assert estimate.gpu["denoiser weights"] == pytest.approx(params * 4 / 1e9)
    assert estimate.gpu["optimizer states"] == pytest.approx(params * 8 / 1e9)
    eight_bit = estimate_memory(cfg.replace(optimizer_type="AdamW8bit", full_bf16=True))
    assert eight_bit.gpu["optimizer states"] == pytest.approx(params * 2 / 1e9)
    assert eight_bit.gpu["gradients"] == pytest.approx(params * 2 / 1e9)


def test_without_a_local_model_or_a_family_there_is_no_estimate() -> None:
    assert estimate_memory(TrainConfig("lora", {"pretrained_model_name_or_path": "some/hub-model"})) is None
    assert memory_report(TrainConfig("lora", {}), card_gb=8) == ("", [])


def test_a_local_model_is_counted_from_its_files(tiny_sd1_dir: Path, tiny_flux_dir: Path) -> None:
    from trainers.models import load_model
    from trainers.models.block_swap import swap_units

    size = model_size(TrainConfig("lora", {"pretrained_model_name_or_path": str(tiny_sd1_dir)}))
    model = load_model(str(tiny_sd1_dir), "auto", torch.float32)
    assert size.source == "the model's files" and size.denoiser == sum(p.numel() for p in model.unet.parameters())
    linear = sum(m.weight.numel() for m in model.unet.modules() if isinstance(m, torch.nn.Linear))
    assert size.denoiser_linear == linear
    flux = model_size(TrainConfig("lora", {"pretrained_model_name_or_path": str(tiny_flux_dir)}))
    assert flux.swap_units == swap_units(load_model(str(tiny_flux_dir), "auto", torch.float32).unet)


def test_validate_and_print_config_show_the_estimate_and_the_advice(monkeypatch, tmp_path: Path) -> None:
    from gui.checks import check_form
    from trainers.config_report import print_config

    monkeypatch.setattr(memory_estimate, "_cards", lambda: (("0", 48.0), ("1", 12.0)))
    assert check_form("lora", {**FLUX_LORA, "gpu_ids": "0"}).warnings == []  # the 48 GB card
    report = check_form("lora", dict(FLUX_LORA))  # the smallest of the cards it may use
    assert "Estimated peak GPU memory" in report.memory and "Estimated peak GPU memory" in report.summary()
    assert any("would fit: " in w and "int8 base" in w and "12 GB card" in w for w in report.warnings)
    config = tmp_path / "flux.toml"
    config.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in FLUX_LORA.items()), encoding="utf-8")
    out = StringIO()
    print_config("lora", config, [], out=out)
    text = out.getvalue()
    assert "# memory: Estimated peak GPU memory ~" in text and "# warning: the run needs ~" in text


@pytest.mark.slow
def test_a_cpu_run_holds_the_weights_and_optimizer_states_the_estimate_predicts(tmp_path: Path) -> None:
    from helpers import run_trainer, sets

    from benchmarks.memory_benchmark import build_medium_sd1
    from trainers.demo import build_dataset

    model = build_medium_sd1(tmp_path / "model")  # 109 M parameters, latents 8x8: activations are small
    values = dict(pretrained_model_name_or_path=str(model), train_data_dir=str(build_dataset(tmp_path / "data")),
                  output_dir=str(tmp_path / "out"), max_train_steps=2, resolution="64", train_batch_size=1,
                  max_data_loader_n_workers=0, learning_rate=1e-5, optimizer_type="AdamW", save_precision="float")
    result = run_trainer(sets(**values), tmp_path / "run", method="finetune")
    assert result.returncode == 0, result.stderr[-3000:]
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    predicted = estimate_memory(TrainConfig("finetune", values), on_gpu=False).weights_and_states_gb()
    assert predicted > 1.7  # 109 M parameters: float32 weights and gradients, AdamW's two moments
    assert status["memory_estimate_gb"] == pytest.approx(predicted, abs=0.02)
    # measured: the peak resident memory from the first step on, above the process before the model loaded
    assert abs(status["memory_peak_gb"] - predicted) <= 0.15 * predicted, (status["memory_peak_gb"], predicted)


def test_encoding_the_captions_before_training_is_counted_and_warned_when_it_does_not_fit_the_card() -> None:
    """Cached captions are encoded once with the text encoders alone on the card (the denoiser, quantized or not, goes
    there after the pass): Qwen-Image's 8.3 B Qwen2.5-VL in bf16 does not fit a 16 GB card then, whatever the steps
    need; the message says which pass is the peak."""
    values = {"pretrained_model_name_or_path": "Qwen/Qwen-Image", "model_family": "qwen_image", "resolution": "1024",
              "mixed_precision": "bf16", "gradient_checkpointing": True, "cache_text_encoder_outputs": True,
              "cache_latents": True, "network_train_unet_only": True, "base_model_precision": "nf4", "blocks_to_swap": 30}
    bf16, int8 = TrainConfig("lora", values), TrainConfig("lora", {**values, "text_encoder_precision": "int8"})
    assert estimate_memory(bf16).caching_card_gb > 16 > estimate_memory(int8).caching_card_gb
    line, warnings = memory_report(bf16, card_gb=16)
    assert "Encoding the captions before the first step takes" in line and "the peak is this pass" in line
    assert any("text_encoder_precision" in w and "encoding the captions" in w for w in warnings), warnings
    assert not [w for w in memory_report(int8, card_gb=16)[1] if "encoding the captions" in w]
    assert "the steps are the peak" in memory_report(int8, card_gb=16)[0]
    on_card = TrainConfig("lora", {**values, "text_encoder_precision": "int8", "blocks_to_swap": 0})
    assert estimate_memory(on_card).caching == estimate_memory(int8).caching  # the nf4 denoiser is not there yet
    pass_ = estimate_memory(int8).caption_pass
    assert set(pass_) == {"text encoders", "activations"} and 0.05 < pass_["activations"] < 0.2  # the VAE off the card
    batched = estimate_memory(TrainConfig("lora", {**values, "text_encoder_precision": "int8",
                                                   "text_encoder_batch_size": 8}))
    assert batched.caption_batch == 8 and batched.caption_pass["activations"] == pytest.approx(8 * pass_["activations"])
    uncached = TrainConfig("lora", {**values, "cache_text_encoder_outputs": False})
    assert estimate_memory(uncached).caching == 0  # the text encoders stay for the steps: counted in them
