"""sd-scripts' t5xxl_max_token_length is text_encoder_max_tokens here (named for what it is, not for one encoder):
configs written before the rename, sd-scripts files, kohya_ss JSON and --set with the old name all read it, and the
kohya export writes sd-scripts' name back."""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

from trainers.adapters.kohya.export import sd_scripts_command
from trainers.core.options import load_config
from trainers.core.options.migrations import SCHEMA_VERSION


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_config_of_schema_version_1_is_migrated(tmp_path: Path) -> None:
    old = _write(tmp_path / "old.toml", 'schema_version = 1\nmethod = "lora"\n[flow]\nt5xxl_max_token_length = 128\n')
    cfg = load_config("lora", old)
    assert cfg.text_encoder_max_tokens == 128
    saved = tomllib.loads(cfg.to_toml())
    assert saved["schema_version"] == SCHEMA_VERSION and saved["flow"]["text_encoder_max_tokens"] == 128
    assert "t5xxl_max_token_length" not in saved["flow"]


def test_sd_scripts_files_and_the_old_name_on_the_command_line_are_read(tmp_path: Path) -> None:
    flat = _write(tmp_path / "flux.toml", 'pretrained_model_name_or_path = "flux1-dev.safetensors"\n'
                                          't5xxl_max_token_length = 256\nnetwork_module = "networks.lora_flux"\n')
    assert load_config("lora", flat).text_encoder_max_tokens == 256
    assert load_config("lora", overrides=["t5xxl_max_token_length=64"]).text_encoder_max_tokens == 64
    assert load_config("lora", overrides=["text_encoder_max_tokens=64"]).text_encoder_max_tokens == 64


def test_kohya_ss_json_reads_it() -> None:
    corpus = Path(__file__).with_name("kohya_corpus") / "kohya_ss" / "presets" / "lora" / "flux1D - adamw8bit fp8.json"
    assert json.loads(corpus.read_text(encoding="utf-8"))["t5xxl_max_token_length"] == 512
    assert load_config("lora", corpus).text_encoder_max_tokens == 512


def test_the_kohya_export_writes_sd_scripts_name() -> None:
    cfg = load_config("lora", overrides=["text_encoder_max_tokens=128"])
    _, text, _ = sd_scripts_command(cfg, family="flux")
    exported = tomllib.loads(text)
    assert exported["t5xxl_max_token_length"] == 128 and "text_encoder_max_tokens" not in exported
