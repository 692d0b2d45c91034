"""sd-scripts keys that are not options of ours: translated where we can, listed where not.

A flat kohya `--config_file` TOML loads as it is; nothing in it is dropped silently.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.options.groups.network import NETWORK_ARG_OPTIONS
from trainers.core.options.training import BY_NAME

# Key -> why it has no effect here. Loading such a key gives a warning naming it.
IGNORED: dict[str, str] = {
    "xformers": "attention always uses PyTorch SDPA here (option sdpa)",
    "mem_eff_attn": "attention always uses PyTorch SDPA here (option sdpa)",
    "sdxl": "the model family is detected from the model (option model_family)",
    "v2": "the model family is detected from the model (option model_family)",
    "lowram": "not needed: models load straight to their device",
    "highvram": "not needed: models load straight to their device",
    "log_with": "TensorBoard logging is on whenever logging_dir is set",
    "cache_text_encoder_outputs_to_disk": "text-encoder outputs are cached in memory only (cache_text_encoder_outputs)",
    "face_crop_aug_range": "face-crop augmentation is not available",
    "caption_dropout_every_n_epochs": "use caption_dropout_rate",
}


def _in_json(value: Any, out: dict[str, Any], problems: list[str]) -> None:
    problems.append("in_json (sd-scripts fine-tuning metadata file) is not supported; put one JSON file per image "
                    "(path, tags, score) in a folder and set metadata_dir")


def _save_model_as(value: Any, out: dict[str, Any], problems: list[str]) -> None:
    if value != "safetensors":
        problems.append(f"save_model_as = {value!r} is not supported; files are always written as safetensors")


TRANSLATED: dict[str, Callable[[Any, dict[str, Any], list[str]], None]] = {
    "save_model_as": _save_model_as,
    "in_json": _in_json,
}


def lift_network_args(flat: dict[str, Any], issues: list[ConfigIssue]) -> None:
    """network_args entries whose key is an option of ours (conv_dim=8, rank_dropout=0.1, ...) become that option,
    so the page shows them in their fields; the others stay in network_args for the network module."""
    entries = flat.get("network_args")
    if isinstance(entries, str):
        entries = [entries]
    if not isinstance(entries, list):
        return
    kept = []
    for entry in entries:
        key, sep, raw = str(entry).partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or key not in NETWORK_ARG_OPTIONS:
            kept.append(entry)
            continue
        if key in flat:
            issues.append(ConfigIssue("network_args", f"{key} is given both as an option and in network_args; "
                                      "keep one", "network"))
            continue
        flat[key] = _number(raw) if BY_NAME[key].kind in ("int", "float", "number") else raw
    flat["network_args"] = kept


def _number(text: str) -> Any:
    try:
        value = float(text)
    except ValueError:
        return text  # the option's check names it
    return int(value) if value.is_integer() else value
