"""The option schema: TOML round trips, sd-scripts configs, overrides and every error message."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from trainers.core.options import OPTIONS, ConfigError, TrainConfig, load_config, options_for, parse_resolution
from trainers.core.options.docs import options_markdown
from trainers.preflight.validate import validate


def write(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def messages(err: pytest.ExceptionInfo) -> str:
    return str(err.value)


def test_names_are_unique_and_kohya_named() -> None:
    names = [o.name for o in OPTIONS]
    assert len(names) == len(set(names))
    for kohya in ("pretrained_model_name_or_path", "train_data_dir", "output_dir", "output_name", "network_dim",
                  "network_alpha", "learning_rate", "unet_lr", "text_encoder_lr", "train_batch_size",
                  "max_train_epochs", "max_train_steps", "resolution", "mixed_precision", "seed",
                  "save_every_n_epochs", "save_every_n_steps"):
        assert kohya in names


def test_round_trip_keeps_zeros_false_and_empty_lists(tmp_path: Path) -> None:
    cfg = load_config("lora", overrides=[
        "noise_offset=0", "max_grad_norm=0.0", "lr_warmup_steps=0", "sdpa=false", "optimizer_args=[]",
        'training_comment="quote \\" and ünïcode\\nnewline"', "max_train_epochs=3", "conv_dim=4", "conv_alpha=0",
    ])
    first = cfg.to_toml()
    path = write(tmp_path, first)
    again = load_config("lora", path)
    assert again.to_toml() == first
    assert again.values == cfg.values
    assert again.noise_offset == 0 and again.max_grad_norm == 0.0 and again.sdpa is False
    assert again.optimizer_args == [] and again.conv_alpha == 0
    assert again.training_comment == 'quote " and ünïcode\nnewline'
    raw = tomllib.loads(first)
    assert raw["loss"]["noise_offset"] == 0 and raw["optimizer"]["optimizer_args"] == []
    assert raw["precision"]["sdpa"] is False


def test_saved_toml_is_sectioned_by_group_and_holds_every_option(tmp_path: Path) -> None:
    cfg = load_config("lora", overrides=["max_train_steps=5"])
    raw = tomllib.loads(cfg.to_toml())
    assert raw["method"] == "lora"
    assert raw["network"]["network_dim"] == 16
    written = {k for section in raw.values() if isinstance(section, dict) for k in section}
    unset = {o.name for o in options_for("lora") if cfg.values[o.name] is None}
    assert written == {o.name for o in options_for("lora")} - unset


def test_flat_sd_scripts_config_is_accepted_and_ignored_keys_are_listed(tmp_path: Path) -> None:
    path = write(tmp_path, """
pretrained_model_name_or_path = "/models/sd15"
train_data_dir = "/data/train"
output_dir = "/out"
output_name = "mylora"
network_module = "networks.lora"
network_dim = 32
network_alpha = 16
network_args = ["conv_dim=8", "conv_alpha=4"]
learning_rate = 1e-4
unet_lr = 1e-4
text_encoder_lr = 5e-5
train_batch_size = 2
max_train_epochs = 10
resolution = "512,512"
mixed_precision = "bf16"
save_model_as = "safetensors"
xformers = true
cache_latents = true
seed = 0
save_every_n_epochs = 1
""")
    warnings: list[str] = []
    cfg = load_config("lora", path, warnings=warnings)
    assert cfg.network_dim == 32 and cfg.network_alpha == 16.0 and cfg.conv_dim == 8 and cfg.conv_alpha == 4
    assert cfg.text_encoder_lr == 5e-5 and cfg.seed == 0 and cfg.mixed_precision == "bf16"
    assert any(w.startswith("xformers") for w in warnings)
    assert cfg.cache_latents is True  # a real option now, no longer ignored


def test_unknown_key_names_the_closest_valid_one(tmp_path: Path) -> None:
    path = write(tmp_path, "[network]\nnetwork_dimm = 8\n[optimizer]\nlearning_rat = 1e-4\n")
    with pytest.raises(ConfigError) as err:
        load_config("lora", path)
    text = messages(err)
    assert "network_dimm" in text and "did you mean 'network_dim'" in text
    assert "learning_rat" in text and "did you mean 'learning_rate'" in text


def test_unknown_section_is_read_as_sd_scripts_does_and_named(tmp_path: Path) -> None:
    warnings: list[str] = []
    cfg = load_config("lora", write(tmp_path, "[netwrk]\nnetwork_dim = 8\n"), warnings=warnings)
    assert cfg.network_dim == 8
    assert any("[netwrk]" in w and "did you mean [network]?" in w for w in warnings), warnings


@pytest.mark.parametrize("assignment, field, fragments", [
    ("network_dim=0", "network_dim", ["got 0", "from 1 to 1024"]),
    ("network_dim=2.5", "network_dim", ["got 2.5", "whole number"]),
    ("learning_rate='fast'", "learning_rate", ["'fast'", "a number"]),
    ("mixed_precision='fp8'", "mixed_precision", ["'fp8'", "'no', 'fp16', 'bf16'"]),
    ("gradient_checkpointing=1", "gradient_checkpointing", ["got 1", "true or false"]),
    ("noise_offset=3", "noise_offset", ["got 3", "from 0 to 1"]),
])
def test_wrong_type_or_range_names_field_value_and_allowed(assignment: str, field: str, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        load_config("lora", overrides=[assignment])
    issue = err.value.issues[0]
    assert issue.field == field
    for fragment in fragments:
        assert fragment in issue.message


def test_all_problems_are_reported_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        load_config("lora", overrides=["network_dim=-1", "seed='x'", "bogus=1"])
    assert {i.field for i in err.value.issues} == {"network_dim", "seed", "bogus"}


def test_cli_overrides_win_over_the_file_and_parse_as_toml(tmp_path: Path) -> None:
    path = write(tmp_path, "[network]\nnetwork_dim = 8\n[optimizer]\nlearning_rate = 1e-3\n")
    cfg = load_config("lora", path, ["network_dim=32", "learning_rate=2e-4", "output_name=my lora é",
                                     "optimizer_args=weight_decay=0.1"])
    assert cfg.network_dim == 32 and cfg.learning_rate == 2e-4
    assert cfg.output_name == "my lora é" and cfg.optimizer_args == ["weight_decay=0.1"]


def test_choice_case_is_normalised() -> None:
    assert load_config("lora", overrides=["optimizer_type='adamw8bit'"]).optimizer_type == "AdamW8bit"


def test_invalid_toml_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config("lora", write(tmp_path, "network_dim = = 3"))
    assert "c.toml" in messages(err) and "not valid TOML" in messages(err)


def test_missing_length_is_an_error_not_a_hidden_default() -> None:
    issues = validate(TrainConfig("lora"), check_paths=False)
    fields = {i.field for i in issues}
    assert "max_train_epochs" in fields
    assert {"pretrained_model_name_or_path", "train_data_dir", "output_dir"} <= fields


def test_cross_field_checks() -> None:
    cfg = TrainConfig("lora", {"full_bf16": True, "network_train_unet_only": True,
                               "network_train_text_encoder_only": True, "conv_alpha": 1.0,
                               "lr_warmup_steps": 2.5, "lr_scheduler": "cosine", "max_train_steps": 10})
    fields = {i.field for i in validate(cfg, check_paths=False)}
    assert {"full_bf16", "network_train_text_encoder_only", "conv_alpha", "lr_warmup_steps"} <= fields


def test_path_checks_name_the_field(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "taken.safetensors").write_bytes(b"x")
    cfg = TrainConfig("lora", {"pretrained_model_name_or_path": str(tmp_path / "nope"),
                               "train_data_dir": str(tmp_path / "missing"), "output_dir": str(tmp_path / "out"),
                               "output_name": "taken", "max_train_steps": 1})
    issues = {i.field: i.message for i in validate(cfg)}
    assert "does not exist" in issues["pretrained_model_name_or_path"]
    assert "folder not found" in issues["train_data_dir"]
    assert "already exists" in issues["output_name"] and "overwrite_output" in issues["output_name"]


def test_resolution_parsing() -> None:
    assert parse_resolution("512") == (512, 512)
    assert parse_resolution("768,512") == (768, 512)
    with pytest.raises(ValueError, match="multiples of 8"):
        parse_resolution("500")


def test_options_doc_lists_every_option() -> None:
    doc = options_markdown()
    assert all(f"`{o.name}`" in doc for o in OPTIONS)


def test_methods_see_only_their_options(tmp_path: Path) -> None:
    warnings: list[str] = []
    cfg = load_config("finetune", write(tmp_path, "network_dim = 8\n"), warnings=warnings)
    assert "network_dim" not in cfg.values
    assert any("network_dim is not used by finetune" in w for w in warnings)


def test_committed_options_doc_is_current() -> None:
    committed = (Path(__file__).resolve().parents[2] / "docs" / "options.md").read_text(encoding="utf-8")
    assert committed.strip() == options_markdown().strip(), "run: python -m trainers options > docs/options.md"


def test_each_method_names_its_output_after_itself_by_default(tmp_path) -> None:
    assert {m: TrainConfig(m).output_name for m in ("lora", "dreambooth", "finetune")} == \
        {"lora": "lora", "dreambooth": "dreambooth", "finetune": "finetune"}
    cfg = TrainConfig("finetune")
    cfg.save(tmp_path / "c.toml")
    assert load_config("finetune", tmp_path / "c.toml").output_name == "finetune"


def test_migrations_run_on_every_config_load_and_newer_configs_are_refused(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import trainers.core.options.migrations as migrations

    old = write(tmp_path, 'schema_version = 0\n[optimizer]\nlearning_rat = 0.5\n', "old.toml")
    monkeypatch.setattr(migrations, "MIGRATIONS", {**migrations.MIGRATIONS, 0: lambda flat: {
        ("learning_rate" if k == "learning_rat" else k): v for k, v in flat.items()}})
    assert load_config("lora", old).learning_rate == 0.5  # resume and --config read configs this way too
    newer = write(tmp_path, 'schema_version = 99\nmethod = "lora"\n[optimizer]\nlearning_rate = 0.5\n', "new.toml")
    with pytest.raises(ConfigError) as err:
        load_config("lora", newer)
    assert ("new.toml was written by a newer Atelier (schema_version 99; this one reads up to "
            f"{migrations.SCHEMA_VERSION})") in messages(err)
    with pytest.raises(ConfigError, match="schema_version: .*got 'one'"):
        load_config("lora", write(tmp_path, 'schema_version = "one"\n', "bad.toml"))


def test_an_option_in_the_wrong_section_is_read_and_said(tmp_path: Path) -> None:
    warnings: list[str] = []
    path = write(tmp_path, 'schema_version = 1\nmethod = "lora"\n[network]\nlearning_rate = 0.5\nnetwork_dim = 8\n')
    cfg = load_config("lora", path, warnings=warnings)
    assert cfg.learning_rate == 0.5 and cfg.network_dim == 8
    assert any("learning_rate is in [network] but belongs in [optimizer]" in w for w in warnings), warnings
    assert not any("network_dim" in w for w in warnings)
