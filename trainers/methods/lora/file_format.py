"""Saving/reading LoRA .safetensors files with kohya sd-scripts compatible metadata.

The `ss_*` keys are what kohya's train_network.py writes (A1111/Forge/ComfyUI and civitai
read them); the `modelspec.*` keys follow Stability AI's model spec 1.0.0 as kohya's
`library/sai_model_spec.py` fills them for LoRAs.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

from trainers.core.fsio import atomic_path
from trainers.models.base import ModelFamily


@dataclass(frozen=True)
class DatasetDir:
    n_repeats: int
    img_count: int


@dataclass(frozen=True, kw_only=True)
class TrainingMetadata:
    """What a LoRA file records about its training run (see `build_metadata`)."""

    family: ModelFamily  # says ss_base_model_version, modelspec.architecture and .implementation
    v_parameterization: bool = False
    sd_model_name: str
    network_dim: int
    network_alpha: float
    conv_dim: int | None = None
    conv_alpha: float | None = None
    network_module: str = "networks.lora"
    network_args: Mapping[str, str] | None = None  # sd-scripts' network kwargs (default: from conv_dim/conv_alpha)
    network_dropout: float | None = None
    resolution: tuple[int, int]  # (width, height)
    epoch: int  # epochs done when saved
    num_epochs: int
    steps: int  # steps done when saved
    max_train_steps: int
    learning_rate: float
    unet_lr: float | None = None
    text_encoder_lr: float | None = None
    num_train_images: int
    num_reg_images: int = 0
    batch_size: int
    output_name: str
    title: str | None = None  # modelspec.title; defaults to output_name
    clip_skip: int | None = None
    mixed_precision: str = "no"
    seed: int
    training_started_at: float  # unix time
    training_finished_at: float  # unix time (of this save)
    dataset_dirs: Mapping[str, DatasetDir] = field(default_factory=dict)
    tag_frequency: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    session_id: int | None = None  # sd-scripts: a random number shared by every save of one run
    modelspec: Mapping[str, str | None] = field(default_factory=dict)  # author, description, license, tags...
    extra: Mapping[str, object] = field(default_factory=dict)  # more ss_* keys of the run (optimizer, ...)


def _network_args(info: TrainingMetadata) -> dict[str, str]:
    if info.network_args is not None:
        return dict(info.network_args)
    if not info.conv_dim:
        return {}
    conv_alpha = 1.0 if info.conv_alpha is None else info.conv_alpha
    return {"conv_dim": str(info.conv_dim), "conv_alpha": str(conv_alpha)}  # kohya keeps CLI strings


_FAMILY_KEYS = ("ss_base_model_version", "ss_v2", "modelspec.architecture", "modelspec.implementation")


def build_metadata(info: TrainingMetadata) -> dict[str, str]:
    """kohya-style `ss_*` and `modelspec.*` metadata; every value is a string, None values are left out."""
    width, height = info.resolution
    family = info.family.lora_metadata(info.v_parameterization)
    values: dict[str, object] = {
        "ss_base_model_version": family["ss_base_model_version"],
        "ss_v2": family["ss_v2"],
        "ss_v_parameterization": info.v_parameterization,
        "ss_sd_model_name": info.sd_model_name,
        "ss_session_id": info.session_id,
        "ss_network_module": info.network_module,
        "ss_network_dim": info.network_dim,
        "ss_network_alpha": float(info.network_alpha),
        "ss_network_args": json.dumps(_network_args(info)) if _network_args(info) else None,
        "ss_network_dropout": info.network_dropout,
        "ss_resolution": str((width, height)),
        "ss_epoch": info.epoch,
        "ss_num_epochs": info.num_epochs,
        "ss_steps": info.steps,
        "ss_max_train_steps": info.max_train_steps,
        "ss_learning_rate": info.learning_rate,
        "ss_unet_lr": info.unet_lr,
        "ss_text_encoder_lr": info.text_encoder_lr,
        "ss_num_train_images": info.num_train_images,
        "ss_num_reg_images": info.num_reg_images,
        "ss_batch_size_per_device": info.batch_size,
        "ss_output_name": info.output_name,
        "ss_clip_skip": info.clip_skip,
        "ss_mixed_precision": info.mixed_precision,
        "ss_seed": info.seed,
        "ss_training_started_at": info.training_started_at,
        "ss_training_finished_at": info.training_finished_at,
        "ss_dataset_dirs": json.dumps({name: asdict(d) for name, d in info.dataset_dirs.items()}),
        "ss_tag_frequency": json.dumps({name: dict(tags) for name, tags in info.tag_frequency.items()}),
        **info.extra,
        "modelspec.sai_model_spec": "1.0.1",
        "modelspec.architecture": family["modelspec.architecture"],
        "modelspec.implementation": family["modelspec.implementation"],
        "modelspec.title": info.title or info.output_name,
        "modelspec.resolution": f"{width}x{height}",
        "modelspec.date": datetime.fromtimestamp(info.training_finished_at).isoformat(timespec="seconds"),
        "modelspec.prediction_type": "v" if info.v_parameterization else "epsilon",
        "modelspec.encoder_layer": info.clip_skip,
        **{f"modelspec.{k}": v for k, v in info.modelspec.items()},
    }
    values.update({k: v for k, v in family.items() if k not in _FAMILY_KEYS})  # e.g. a flow family's own ss_* keys
    return {key: str(value) for key, value in values.items() if value is not None}


def with_hashes(tensors: dict[str, Tensor], metadata: dict[str, str]) -> dict[str, str]:
    """`metadata` plus sshs_model_hash and sshs_legacy_hash, computed as sd-scripts does for the additional-networks
    extension and A1111 (over the file as it would be with only the ss_* metadata)."""
    from safetensors.torch import save

    data = save({k: v.contiguous() for k, v in tensors.items()}, {k: v for k, v in metadata.items() if k.startswith("ss_")})
    header = 8 + int.from_bytes(data[:8], "little")
    return {**metadata, "sshs_model_hash": hashlib.sha256(data[header:]).hexdigest(),
            "sshs_legacy_hash": hashlib.sha256(data[0x100000:0x110000]).hexdigest()[:8]}


def save_lora_file(path: Path, tensors: dict[str, Tensor], metadata: dict[str, str]) -> None:
    """Write a .safetensors file atomically: a temp file in the same folder, fsync, then `os.replace`.

    The final file gets ordinary permissions (0o666 minus the umask), not tempfile's 0600.
    """
    path = Path(path)
    bad = [key for key, value in metadata.items() if not isinstance(value, str)]
    if bad:
        raise TypeError(f"safetensors metadata values must be strings; not for {bad}")
    with atomic_path(path) as tmp:
        save_file({key: value.contiguous() for key, value in tensors.items()}, tmp, metadata=metadata)


def read_lora_file(path: Path) -> tuple[dict[str, Tensor], dict[str, str]]:
    """(tensors on CPU, metadata) of a .safetensors file."""
    with safe_open(str(path), framework="pt", device="cpu") as handle:
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}
        metadata = handle.metadata() or {}
    return tensors, dict(metadata)
