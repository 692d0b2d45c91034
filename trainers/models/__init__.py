"""Model families as plug-ins: detect which one a model is, then load it through that plug-in.

A family is one folder (trainers/models/<family>/, its ModelFamily in `family.py`) plus one line in
trainers/core/registry.py. Single-file checkpoints are read and written by `single_file/`.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.options.groups.model import COMPONENT_FILE_OPTIONS
from trainers.models.base import (
    CheckpointKeys,
    LoadedModel,
    ModelFamily,
    ModelFiles,
    ModelLoadError,
    SizeConditioning,
)
from trainers.models.components import read_json
from trainers.models.families import all_families, family
from trainers.models.single_file import SINGLE_FILE_SUFFIXES, load_single_file, save_full_model

__all__ = ["SINGLE_FILE_SUFFIXES", "LoadedModel", "ModelFamily", "ModelFiles", "ModelLoadError", "SizeConditioning",
           "all_families", "detect_family", "family", "load_model", "load_single_file", "resolve_model_folder",
           "save_full_model"]


def resolve_model_folder(name_or_path: str) -> Path:
    """A local diffusers folder as it is, or a hub id fetched (or found in the cache) as one."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise ModelLoadError(f"pretrained_model_name_or_path: {path} is a file but not a .safetensors or .ckpt "
                             "checkpoint; give a diffusers model folder or a single-file checkpoint")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(
            name_or_path,
            allow_patterns=["model_index.json", "*/*.json", "*/*.txt", "*/*.safetensors"],
            ignore_patterns=["*.fp16.*", "*non_ema*", "*.ema.*"],
        ))
    except Exception as err:  # noqa: BLE001 - hub errors come in many types; the message is what matters
        raise ModelLoadError(
            f"pretrained_model_name_or_path: {name_or_path!r} is not a local folder and could not be fetched "
            f"from the hub ({type(err).__name__}: {err})") from None


def detect_family(folder: Path) -> ModelFamily:
    """The family of a diffusers folder, from its pipeline class and UNet config (the most specific claim wins)."""
    index = read_json(folder / "model_index.json") if (folder / "model_index.json").exists() else {}
    # A pipeline whose denoiser is a transformer lists no unet (and has no unet/ folder).
    unet_cfg = read_json(folder / "unet" / "config.json") if "unet" in index or not index else {}
    for candidate in all_families():
        if candidate.claims_folder(index, unet_cfg, folder):
            return candidate
    pipeline, cross_dim = str(index.get("_class_name", "")), unet_cfg.get("cross_attention_dim")
    found = f"pipeline class {pipeline!r}" if pipeline else f"a UNet with cross_attention_dim={cross_dim!r}"
    known = ", ".join(f.title for f in reversed(all_families()))
    raise ModelLoadError(
        f"pretrained_model_name_or_path: cannot tell the model family of {folder}: found {found}. "
        f"Supported: {known} diffusers folders. If it is one of these, set model_family.")


def model_option_issues(name_or_path: str, clip_skip: int,
                        values: Mapping[str, Any] | None = None) -> list[ConfigIssue]:
    """Options that depend on the model, checked against its configs before any weight loads (a hub id is checked
    after it is fetched, when it loads). `values`: the config's options, for the family's own checks."""
    path = Path(name_or_path).expanduser()
    file_issues: list[ConfigIssue] = []
    try:
        if path.is_dir():
            found = detect_family(path)
            config_dir = path
        elif path.is_file() and path.suffix.lower() in SINGLE_FILE_SUFFIXES and path.suffix.lower() == ".safetensors":
            from trainers.models.single_file import detect_checkpoint_family, open_checkpoint

            ckpt = open_checkpoint(path)
            found = family(detect_checkpoint_family(ckpt.shapes, str(path)))
            if values is not None:
                file_issues = found.checkpoint_issues(CheckpointKeys(ckpt.shapes, str(path)),
                                                      ModelFiles.from_values(values), str(values.get("vae") or ""))
            config_dir = found.arch_dir
        else:
            return []
    except ModelLoadError as err:
        return [ConfigIssue("pretrained_model_name_or_path", str(err), "model")]
    if values is not None:
        read = {p.option for p in found.checkpoint_parts} if path.is_file() and found.own_checkpoint_layout else set()
        file_issues += [ConfigIssue(option, f"is not read with {path.name} (an {found.title} model: separate files "
                                    "are read for the parts an SD3 or FLUX.1 single file lacks): leave it empty",
                                    "model")
                        for option in COMPONENT_FILE_OPTIONS if str(values.get(option) or "").strip()
                        and option not in read]
    family_issues = file_issues + (found.option_issues(values) if values is not None else [])
    if family_issues or found.objective != "ddpm":
        return family_issues  # clip skip included
    if clip_skip > 1 and not found.supports_clip_skip:
        return [ConfigIssue("clip_skip", f"is {clip_skip}, but {found.title} models take no clip skip: set it to 1",
                            "model")]
    try:
        layers = int(read_json(config_dir / "text_encoder" / "config.json").get("num_hidden_layers", 0))
    except (ModelLoadError, ValueError):
        return []
    if layers and clip_skip > layers:
        return [ConfigIssue("clip_skip", f"is {clip_skip}, but this model's text encoder has {layers} layers: use 1 to "
                            f"{layers}", "model")]
    return []


def load_model(name_or_path: str, requested_family: str, weight_dtype, vae_path: str = "",
               random_init: bool = False, files: ModelFiles = ModelFiles()) -> LoadedModel:
    """The model a run names; `files`: its separate component files (FLUX.1 from a transformer-only file)."""
    path = Path(name_or_path).expanduser()
    if path.is_file() and path.suffix.lower() in SINGLE_FILE_SUFFIXES:  # a checkpoint in the original layout
        return load_single_file(path, requested_family, weight_dtype, vae_path, files=files)
    folder = resolve_model_folder(name_or_path)
    detected = detect_family(folder)
    if requested_family != "auto" and requested_family != detected.name:
        wanted = family(requested_family)
        if wanted.unet_key_style != detected.unet_key_style or type(wanted) is not type(detected):
            raise ModelLoadError(
                f"model_family = {requested_family!r}, but {folder} looks like an {detected.title} model; "
                "set model_family = 'auto' or pick the right model")
        detected = wanted  # families of one plug-in class (SD1/SD2) differ only in sizes: trust the user
    return detected.load(folder, weight_dtype, vae_path, random_init)
