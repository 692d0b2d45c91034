"""Import a kohya config as it is: a kohya_ss GUI JSON or an sd-scripts `--config_file` TOML (torch-free).

    method, values, notes = import_kohya_file(Path("my_lora.json"))

`values` are the options the file sets (read with sd-scripts' meaning, sd-scripts' defaults included where
ours differ); the others keep Atelier's defaults. Problems raise ConfigError, each issue naming its key.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.core.options.kohya_json import read_json_file
from trainers.core.options.kohya_keys import blank
from trainers.core.options.loading import TrainConfig, flatten, load_config, read_toml
from trainers.core.registry import METHOD_NAMES

# Keys that only sd-scripts' full-model scripts read, by the method they suggest.
_DREAMBOOTH_KEYS = ("reg_data_dir", "class_prompt", "num_class_images", "no_token_padding")
_FINETUNE_KEYS = ("in_json", "dataset_repeats", "metadata_dir", "train_text_encoder", "learning_rate_te1",
                  "learning_rate_te2", "block_lr")


def guess_method(flat: dict[str, Any]) -> tuple[str, str]:
    """(method, why) for an sd-scripts TOML, from its keys: a network trains a LoRA; regularization or class
    images make it Dreambooth; otherwise the whole model is finetuned."""
    if any(key.startswith("network_") for key in flat):
        return "lora", "it sets network options (train_network.py)"
    if any(not blank(flat.get(key)) for key in _DREAMBOOTH_KEYS):
        return "dreambooth", "it has regularization or class images (train_db.py)"
    found = [key for key in _FINETUNE_KEYS if key in flat]
    if found:
        return "finetune", f"it sets {', '.join(found)} (fine_tune.py, sdxl_train.py)"
    return "finetune", "it sets no network and no regularization images"


def import_kohya_file(path: Path) -> tuple[str, dict[str, Any], list[str]]:
    """(method, option values the file sets, notes) of a kohya_ss JSON or an sd-scripts TOML.

    The method is the kohya_ss tab a JSON was saved from, or the `method` of one of our TOMLs, or guessed from an
    sd-scripts TOML's keys (said in the notes). Raises ConfigError whose issues name the keys.
    """
    path = Path(path)
    notes: list[str] = []
    if path.suffix.lower() == ".json":
        issues: list[ConfigIssue] = []
        converted = read_json_file(path, issues)
        if converted is None:
            raise ConfigError(issues)
        method = converted.method
    else:
        raw = read_toml(path)
        written_for = raw.get("method")
        if isinstance(written_for, str) and written_for in METHOD_NAMES:
            method = written_for
        else:
            method, why = guess_method(flatten(raw, [], notes=[]))
            notes.append(f"read as a {method} config: {why}")
    cfg = load_config(method, path, warnings=notes)
    return method, _set_values(cfg, path), notes


def _set_values(cfg: TrainConfig, path: Path) -> dict[str, Any]:
    """The options the file decides: those it names, and those its translation or sd-scripts' defaults changed."""
    defaults = TrainConfig(cfg.method).values
    named: set[str] = set()
    if path.suffix.lower() != ".json":
        named = set(flatten(read_toml(path), [], notes=[]))
    return {name: value for name, value in cfg.values.items() if name in named or value != defaults[name]}
