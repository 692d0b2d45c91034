"""sd-scripts keys that are not options of ours: translated where we can, listed where not.

A flat kohya `--config_file` TOML loads as it is; nothing in it is dropped silently.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Key -> why it has no effect here. Loading such a key gives a warning naming it.
IGNORED: dict[str, str] = {
    "xformers": "attention always uses PyTorch SDPA here (option sdpa)",
    "mem_eff_attn": "attention always uses PyTorch SDPA here (option sdpa)",
    "sdxl": "the model family is detected from the model (option model_family)",
    "v2": "the model family is detected from the model (option model_family)",
    "lowram": "not needed: models load straight to their device",
    "highvram": "not needed: models load straight to their device",
    "persistent_data_loader_workers": "data-loader workers always persist between epochs",
    "log_with": "TensorBoard logging is on whenever logging_dir is set",
    "max_token_length": "captions are truncated at 75 tokens (no long-prompt extension yet)",
    "cache_text_encoder_outputs_to_disk": "text-encoder outputs are cached in memory only (cache_text_encoder_outputs)",
    "vae_batch_size": "latents are cached train_batch_size images at a time",
    "color_aug": "color augmentation is not available",
    "face_crop_aug_range": "face-crop augmentation is not available",
    "caption_dropout_every_n_epochs": "use caption_dropout_rate",
}


def _network_module(value: Any, out: dict[str, Any], problems: list[str]) -> None:
    if value != "networks.lora":
        problems.append(f"network_module = {value!r} is not supported; only 'networks.lora' (LoRA/LoCon) is")


def _network_args(value: Any, out: dict[str, Any], problems: list[str]) -> None:
    entries = [value] if isinstance(value, str) else value
    if not isinstance(entries, list):
        problems.append(f"network_args must be a list of 'key=value' strings, got {value!r}")
        return
    for entry in entries:
        key, sep, raw = str(entry).partition("=")
        key = key.strip()
        if not sep or key not in ("conv_dim", "conv_alpha", "conv_rank"):
            problems.append(f"network_args entry {entry!r} is not supported (supported: conv_dim=N, conv_alpha=X)")
            continue
        try:
            number = float(raw)
        except ValueError:
            problems.append(f"network_args entry {entry!r}: {raw.strip()!r} is not a number")
            continue
        out["conv_alpha" if key == "conv_alpha" else "conv_dim"] = int(number) if number.is_integer() else number


def _in_json(value: Any, out: dict[str, Any], problems: list[str]) -> None:
    problems.append("in_json (sd-scripts fine-tuning metadata file) is not supported; put one JSON file per image "
                    "(path, tags, score) in a folder and set metadata_dir")


def _save_model_as(value: Any, out: dict[str, Any], problems: list[str]) -> None:
    if value != "safetensors":
        problems.append(f"save_model_as = {value!r} is not supported; files are always written as safetensors")


TRANSLATED: dict[str, Callable[[Any, dict[str, Any], list[str]], None]] = {
    "network_module": _network_module,
    "network_args": _network_args,
    "save_model_as": _save_model_as,
    "in_json": _in_json,
}
