"""kohya_ss and sd-scripts configs of families: the message names what Atelier does with them, and the list of
families trained here is the registry's (a family that joins is named without editing the adapter)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainers.core.options import ConfigError
from trainers.core.options.loading import load_config
from trainers.core.registry import FAMILIES


def _refusal(path: Path) -> str:
    with pytest.raises(ConfigError) as err:
        load_config("lora", path)
    return " ".join(issue.message for issue in err.value.issues)


@pytest.mark.parametrize("fields, expected", [
    ({"LoRA_type": "Standard", "lumina_checkbox": True}, "preset lumina2_lora_16gb"),
    ({"LoRA_type": "HunyuanImage-2.1"}, "preset hunyuan_image21_lora_24gb"),
    ({"LoRA_type": "Standard", "anima_checkbox": True}, "preset anima_lora_16gb"),
])
def test_kohya_ss_json_of_a_family_says_what_to_import_instead(tmp_path: Path, fields: dict, expected: str) -> None:
    path = tmp_path / "kohya_ss.json"
    path.write_text(json.dumps({"pretrained_model_name_or_path": "/m/model", "train_data_dir": "/d", **fields}),
                    encoding="utf-8")
    message = _refusal(path)
    assert expected in message and "HunyuanImage, Lumina and Anima training is not available" not in message


def test_an_anima_option_outside_an_anima_toml_is_refused_as_anima_and_names_every_family_trained_here(
        tmp_path: Path) -> None:
    path = tmp_path / "sdxl.toml"
    path.write_text('pretrained_model_name_or_path = "/m/sdxl.safetensors"\nllm_adapter_lr = 1e-5\n'
                    'train_data_dir = "/d"\n', encoding="utf-8")
    message = _refusal(path)
    assert "sd-scripts' Anima trainer" in message and "llm_adapter_lr" in message
    assert all(family.title in message for family in FAMILIES)
