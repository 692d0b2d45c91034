"""The quantization and offload options as a user writes them: sd-scripts' names map to them, conflicts and options a
family cannot honour are named before any model loads."""
from __future__ import annotations

from trainers.memory_estimate import base_precision
from trainers.core.options import TrainConfig, config_from_dict
from trainers.preflight.validate import validate


def fields(values: dict) -> dict[str, str]:
    """Each named field's messages, in one text."""
    found: dict[str, str] = {}
    for issue in validate(TrainConfig("lora", values)):
        found[issue.field] = found.get(issue.field, "") + issue.message + "\n"
    return found


def test_sd_scripts_fp8_names_mean_an_fp8_base() -> None:
    warnings: list[str] = []
    cfg = config_from_dict("lora", {"fp8_base_unet": True}, warnings=warnings)
    assert cfg.values["base_model_precision"] == "fp8" and not any("fp8_base_unet" in w for w in warnings)
    assert base_precision({"fp8_base": True}) == "fp8" and base_precision({}) == "none"
    assert base_precision({"fp8_base": True, "base_model_precision": "fp8"}) == "fp8"


def test_conflicts_are_named() -> None:
    found = fields({"fp8_base": True, "base_model_precision": "int8", "mixed_precision": "bf16"})
    assert "'int8'" in found["fp8_base"] and "keep one" in found["fp8_base"]
    found = fields({"layer_offload_fraction": 0.5, "blocks_to_swap": 4, "model_family": "flux"})
    assert "keep one" in found["layer_offload_fraction"]
    assert "gradient_checkpointing" in fields({"layer_offload_fraction": 0.5, "model_family": "flux"})[
        "layer_offload_fraction"]
    assert "mixed_precision" in fields({"base_model_precision": "fp8"})["base_model_precision"]
    assert "base_model_precision" in fields({"base_model_precision": "nf4", "base_weights": ["/x.safetensors"]})[
        "base_weights"]


def test_int8_and_nf4_need_no_mixed_precision_and_unknown_modes_are_refused() -> None:
    assert "base_model_precision" not in fields({"base_model_precision": "int8"})
    assert "base_model_precision" not in fields({"base_model_precision": "nf4", "text_encoder_precision": "int4"})
    try:
        config_from_dict("lora", {"base_model_precision": "int2"})
    except Exception as err:  # noqa: BLE001 - the schema's own error type
        assert "base_model_precision" in str(err) and "'nf4'" in str(err)
    else:
        raise AssertionError("int2 was accepted")


def test_the_sd_scripts_export_writes_fp8_base_and_names_what_it_leaves_out() -> None:
    from trainers.adapters.kohya.export import sd_scripts_command

    def export(**values: object) -> tuple[str, list[str]]:
        cfg = TrainConfig("lora", {"model_family": "flux", "mixed_precision": "bf16", "gradient_checkpointing": True,
                                   **values})
        _, text, notes = sd_scripts_command(cfg, family="flux")
        return text, notes

    text, notes = export(base_model_precision="fp8")
    assert "fp8_base = true" in text and not any("base_model_precision" in n for n in notes)
    text, notes = export(base_model_precision="nf4", layer_offload_fraction=0.5)
    assert "fp8_base = false" in text
    assert any(n.startswith("base_model_precision = 'nf4' is left out") for n in notes)
    assert any(n.startswith("layer_offload_fraction = 0.5 is left out") and "blocks_to_swap" in n for n in notes)
