"""Checks across options and against the disk: every problem at once, each tied to a field."""
from __future__ import annotations

import re
from pathlib import Path

from .loading import TrainConfig
from .options import options_for
from .schema import ConfigError, ConfigIssue

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def parse_resolution(text: str) -> tuple[int, int]:
    """'512' -> (512, 512); '768,512' -> (768, 512) as (width, height)."""
    parts = [p.strip() for p in str(text).replace("x", ",").split(",")]
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ValueError(f"got {text!r}; expected 'N' or 'W,H', e.g. '512' or '768,512'")
    w, h = int(parts[0]), int(parts[1])
    if w < 64 or h < 64 or w % 8 or h % 8:
        raise ValueError(f"got {text!r}; width and height must be multiples of 8, at least 64")
    return w, h


def parse_key_values(entries: list[str]) -> dict[str, object]:
    """['weight_decay=0.01', 'betas=(0.9,0.99)'] -> kwargs; values read as Python literals."""
    import ast

    out: dict[str, object] = {}
    for entry in entries:
        key, sep, raw = entry.partition("=")
        if not sep or not key.strip().isidentifier():
            raise ValueError(f"{entry!r} is not key=value")
        try:
            out[key.strip()] = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            out[key.strip()] = raw.strip()
    return out


def final_output_file(cfg: TrainConfig) -> Path:
    return Path(cfg.output_dir).expanduser() / f"{cfg.output_name}.safetensors"


def validate(cfg: TrainConfig, check_paths: bool = True) -> list[ConfigIssue]:
    """Return every problem of `cfg`; an empty list means it can start."""
    issues: list[ConfigIssue] = []
    group = {o.name: o.group for o in options_for(cfg.method)}

    def bad(name: str, message: str) -> None:
        issues.append(ConfigIssue(name, message, group.get(name, "")))

    for opt in options_for(cfg.method):
        if opt.required and not str(cfg.values[opt.name]).strip():
            bad(opt.name, f"is required: {opt.help}")
    if cfg.max_train_epochs is None and cfg.max_train_steps is None:
        bad("max_train_epochs", "set max_train_epochs or max_train_steps: there is no hidden default length")
    try:
        parse_resolution(cfg.resolution)
    except ValueError as err:
        bad("resolution", str(err))
    if cfg.full_bf16 and cfg.mixed_precision != "bf16":
        bad("full_bf16", f"needs mixed_precision = 'bf16' (it is {cfg.mixed_precision!r})")
    warmup = cfg.lr_warmup_steps
    if warmup >= 1 and not float(warmup).is_integer():
        bad("lr_warmup_steps", f"got {warmup}; use a whole number of steps, or a fraction below 1")
    if warmup and cfg.lr_scheduler == "constant":
        bad("lr_warmup_steps", "the 'constant' scheduler has no warmup; choose 'constant_with_warmup' or set 0")
    try:
        parse_key_values(cfg.optimizer_args)
    except ValueError as err:
        bad("optimizer_args", str(err))
    if not cfg.caption_extension.strip(".").strip():
        bad("caption_extension", "must not be empty, e.g. '.txt'")
    if not cfg.output_name.strip() or any(c in cfg.output_name for c in "/\\\0"):
        bad("output_name", f"got {cfg.output_name!r}; use a plain file name without folders")
    if cfg.method == "lora":
        if cfg.network_train_unet_only and cfg.network_train_text_encoder_only:
            bad("network_train_text_encoder_only", "cannot be combined with network_train_unet_only: nothing "
                "would be trained")
        if cfg.conv_alpha is not None and cfg.conv_dim is None:
            bad("conv_alpha", "is set but conv_dim is not; set conv_dim to train the convolutions")
    if check_paths:
        issues.extend(_path_issues(cfg, group))
    return issues


def _path_issues(cfg: TrainConfig, group: dict[str, str]) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    model = cfg.pretrained_model_name_or_path.strip()
    if model:
        p = Path(model).expanduser()
        if p.is_dir():
            if not (p / "model_index.json").exists() and not (p / "unet").is_dir():
                issues.append(ConfigIssue("pretrained_model_name_or_path", f"{model!r} is a folder but not a "
                              "diffusers model (no model_index.json or unet/ inside)", "model"))
        elif p.exists():
            issues.append(ConfigIssue("pretrained_model_name_or_path", f"{model!r} is a file; single-file "
                          "checkpoints are not supported yet: give a diffusers folder", "model"))
        elif not HUB_ID.match(model):
            issues.append(ConfigIssue("pretrained_model_name_or_path", f"{model!r} does not exist; give a "
                          "diffusers folder or a hub id like 'org/model'", "model"))
    checks = {"train_data_dir": "dir", "vae": "dir"}
    if cfg.method == "lora":
        checks["network_weights"] = "file"
    for name, kind in checks.items():
        value = str(cfg.values.get(name) or "").strip()
        if not value:
            continue
        p = Path(value).expanduser()
        ok = p.is_dir() if kind == "dir" else p.is_file()
        if not ok:
            what = "folder" if kind == "dir" else "file"
            issues.append(ConfigIssue(name, f"{what} not found: {value}", group.get(name, "")))
    if cfg.output_dir.strip() and cfg.output_name.strip():
        final = final_output_file(cfg)
        if final.exists() and not cfg.overwrite_output:
            issues.append(ConfigIssue("output_name", f"{final} already exists; choose another output_name or "
                          "set overwrite_output = true", "saving"))
    return issues


def check(cfg: TrainConfig, check_paths: bool = True) -> None:
    """Raise ConfigError listing every problem."""
    issues = validate(cfg, check_paths)
    if issues:
        raise ConfigError(issues)
