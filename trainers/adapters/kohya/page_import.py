"""Import a config into the page as it is: a kohya_ss GUI JSON, an sd-scripts `--config_file` TOML or one of ours
(torch-free).

    method, values, notes = import_kohya_file(Path("my_lora.json"), runs_dir=Path("runs"))

`values` are the options the file decides, whatever their value: those it sets (read with sd-scripts' meaning,
sd-scripts' defaults included where ours differ), those it names but leaves empty (their default, as sd-scripts
reads them), and those its choices make moot (max_train_steps without max_train_epochs unsets the epochs). The other
options are not the file's: the page keeps them. Problems raise ConfigError, each issue naming its key.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.adapters.kohya.gui_json import read_json_file
from trainers.adapters.kohya.keys import blank
from trainers.core.options.loading import (
    TrainConfig,
    config_from_dict,
    flatten,
    is_sd_scripts_file,
    read_config_options,
    read_toml,
    windows_outputs,
)
from trainers.core.options.training import BY_NAME
from trainers.core.paths import windows_path
from trainers.core.registry import METHOD_NAMES

# Keys that only sd-scripts' full-model scripts read, by the method they suggest.
_DREAMBOOTH_KEYS = ("reg_data_dir", "class_prompt", "num_class_images", "no_token_padding")
_FINETUNE_KEYS = ("in_json", "dataset_repeats", "metadata_dir", "train_text_encoder", "learning_rate_te1",
                  "learning_rate_te2", "block_lr")
# An option a file sets -> the options it makes moot, unset when the file does not set them too. sd-scripts (and
# Atelier) count the steps from max_train_epochs when it is given, and read no folder options with a dataset_config.
MOOT: dict[str, tuple[str, ...]] = {
    "max_train_steps": ("max_train_epochs",),
    "max_train_epochs": ("max_train_steps",),
    "dataset_config": ("train_data_dir", "reg_data_dir", "metadata_dir", "in_json", "in_json_from_captions"),
}
# Outputs that a relative path from another machine would silently create under the page's working folder.
OUTPUT_FOLDERS = ("output_dir", "logging_dir")


def guess_method(flat: dict[str, Any]) -> tuple[str, str]:
    """(method, why) for an sd-scripts TOML, from its keys: a new word is textual inversion; a ControlNet to train
    or control images without masked_loss make it ControlNet; a network trains a LoRA; regularization or class images
    make it Dreambooth; otherwise the whole model is finetuned."""
    if "token_string" in flat:
        return "textual_inversion", "it sets token_string (train_textual_inversion.py)"
    if "controlnet_model_name_or_path" in flat or (not blank(flat.get("conditioning_data_dir"))
                                                   and not flat.get("masked_loss")
                                                   and not any(key.startswith("network_") for key in flat)):
        return "controlnet", "it sets controlnet_model_name_or_path or conditioning_data_dir (train_control_net.py)"
    if any(key.startswith("network_") for key in flat):
        return "lora", "it sets network options (train_network.py)"
    if any(not blank(flat.get(key)) for key in _DREAMBOOTH_KEYS):
        return "dreambooth", "it has regularization or class images (train_db.py)"
    found = [key for key in _FINETUNE_KEYS if key in flat]
    if found:
        return "finetune", f"it sets {', '.join(found)} (fine_tune.py, sdxl_train.py)"
    return "finetune", "it sets no network and no regularization images"


def import_kohya_file(path: Path, runs_dir: Path | None = None) -> tuple[str, dict[str, Any], list[str]]:
    """(method, option values the file decides, notes) of a kohya_ss JSON, an sd-scripts TOML or one of ours.

    The method is the kohya_ss tab a JSON was saved from, or the `method` of one of our TOMLs, or guessed from an
    sd-scripts TOML's keys (said in the notes). With `runs_dir`, a kohya file's relative output_dir and logging_dir
    (written for the folder sd-scripts ran in) are read under it. Raises ConfigError whose issues name the keys.
    """
    path = Path(path)
    notes: list[str] = []
    issues: list[ConfigIssue] = []
    if path.suffix.lower() == ".json":
        converted = read_json_file(path, issues)
        if converted is None:
            raise ConfigError(issues)
        method, named, kohya = converted.method, set(converted.decided), True
        windows_out = windows_outputs(converted.options)
    else:
        raw = read_toml(path)
        file_flat = flatten(raw, [], notes=[])
        named, kohya = set(file_flat) & set(BY_NAME), is_sd_scripts_file(raw)
        windows_out = windows_outputs(file_flat)
        written_for = raw.get("method")
        if isinstance(written_for, str) and written_for in METHOD_NAMES:
            method = written_for
        else:
            method, why = guess_method(file_flat)
            notes.append(f"read as a {method} config: {why}")
    flat, foreign = read_config_options(method, path, [], notes, issues)
    # A prompts file that is not here stays in the page, where Validate says that samples are off without it.
    cfg = config_from_dict(method, flat, issues, notes, foreign)
    decided = (cfg.given | named) - set(windows_out)  # the page keeps its own output folders
    values = {name: value for name, value in cfg.values.items() if name in decided}
    _unset_moot(values, cfg.method)
    if kohya and runs_dir is not None:
        _outputs_under(values, Path(runs_dir), notes)
    _name_windows_paths(values, notes)
    return method, values, notes


def _unset_moot(values: dict[str, Any], method: str) -> None:
    defaults = TrainConfig(method).values
    for choice, moot in MOOT.items():
        if values.get(choice) in (None, ""):
            continue
        for name in moot:
            if name in defaults:
                values.setdefault(name, defaults[name])


def _outputs_under(values: dict[str, Any], runs_dir: Path, notes: list[str]) -> None:
    for name in OUTPUT_FOLDERS:
        text = str(values.get(name) or "").strip()
        if not text or windows_path(text) or text.startswith(("/", "~")):
            continue
        values[name] = os.path.normpath(runs_dir.absolute() / text)
        notes.append(f"{name} = {text!r} is relative (to the folder sd-scripts ran in, on the machine the file was "
                     f"written on): read as {values[name]}, under the runs folder")


def _name_windows_paths(values: dict[str, Any], notes: list[str]) -> None:
    found = [f"{name} = {value!r}" for name, value in values.items()
             if isinstance(value, str) and value and (BY_NAME[name].path or name == "resume") and windows_path(value)]
    if found:
        notes.append(f"paths written on Windows (another machine): {', '.join(found)}; give this machine's paths "
                     "(Validate names each until then)")
