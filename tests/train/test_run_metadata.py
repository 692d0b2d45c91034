"""The training settings a LoRA file records, as sd-scripts writes them."""
from __future__ import annotations

from types import SimpleNamespace

from trainers.core.options import TrainConfig
from trainers.train.metadata import run_metadata


def _session() -> SimpleNamespace:
    return SimpleNamespace(plan=SimpleNamespace(global_batch=4, steps_per_epoch=10, gradient_accumulation_steps=2),
                           catalog=SimpleNamespace(num_validation_images=3))


def test_optimizer_is_recorded_as_its_class_path_with_its_arguments() -> None:
    cfg = TrainConfig("lora", {"optimizer_type": "AdamW8bit", "optimizer_args": ["weight_decay=0.1", "betas=(0.9,0.99)"],
                               "pretrained_model_name_or_path": "some/hub-model"})
    meta = run_metadata(cfg, _session())
    assert meta["ss_optimizer"] == "bitsandbytes.optim.adamw.AdamW8bit(weight_decay=0.1,betas=(0.9,0.99))"
    assert meta["ss_total_batch_size"] == 4 and meta["ss_num_batches_per_epoch"] == 20
    plain = run_metadata(cfg.replace(optimizer_type="AdamW", optimizer_args=[]), _session())
    assert plain["ss_optimizer"] == "torch.optim.adamw.AdamW"


def test_validation_settings_are_recorded_under_sd_scripts_keys() -> None:
    cfg = TrainConfig("lora", {"validation_split": 0.25, "validate_every_n_steps": 50,
                               "pretrained_model_name_or_path": "some/hub-model"})
    meta = run_metadata(cfg, _session())
    assert (meta["ss_validation_split"], meta["ss_validate_every_n_steps"], meta["ss_num_validation_images"]) == (
        0.25, 50, 3)
    assert "ss_validation_seed" not in meta and "ss_max_validation_steps" not in meta  # unset: left out
