"""Saving a fully trained model as a diffusers folder (until single-file saving lands in trainers/models).

The folder is written beside its final place and renamed into it, so a crash leaves the old
folder or the new one, never half a model. `StableDiffusionPipeline.from_pretrained(folder)`
(or the SDXL pipeline) loads it.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from .fsutil import _fsync_dir, current_umask
from .models import LoadedModel

UNET_WEIGHTS = "diffusion_pytorch_model.safetensors"
TEXT_ENCODER_DIRS = ("text_encoder", "text_encoder_2")
TOKENIZER_DIRS = ("tokenizer", "tokenizer_2")


def cast_state(state: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """A CPU copy in the save precision (floating tensors only); the trained weights are left alone."""
    return {k: (v.detach().to("cpu", dtype) if v.is_floating_point() else v.detach().cpu()).contiguous()
            for k, v in state.items()}


def source_scheduler(model: LoadedModel) -> Any:
    """The base model's own inference scheduler when it has one; else DDIM from the training scheduler."""
    import diffusers

    folder = Path(model.source).expanduser() / "scheduler"
    config_file = folder / "scheduler_config.json"
    if config_file.is_file():
        import json

        name = json.loads(config_file.read_text(encoding="utf-8")).get("_class_name", "")
        cls = getattr(diffusers, name, None)
        if cls is not None:
            return cls.from_pretrained(str(folder))
    from .sampling import build_scheduler

    return build_scheduler(model, "ddim")


def save_diffusers_folder(model: LoadedModel, path: Path, dtype: torch.dtype,
                          unet_state: dict[str, torch.Tensor] | None = None,
                          text_encoder_states: list[dict[str, torch.Tensor] | None] | None = None) -> Path:
    """Write the model to the folder `path` atomically.

    `unet_state` / `text_encoder_states`: weights to save instead of the modules' own (e.g. EMA
    weights); None means the module's current weights. UNet and text encoders are saved in
    `dtype`; the VAE, tokenizers and scheduler as they are.
    """
    from .sampling import build_pipeline

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    old: Path | None = None
    try:
        pipe = build_pipeline(model, "ddim")
        pipe.register_modules(scheduler=source_scheduler(model))
        pipe.save_config(str(tmp))  # model_index.json: which class each component is
        pipe.scheduler.save_pretrained(str(tmp / "scheduler"))
        for name, tok in zip(TOKENIZER_DIRS, model.tokenizers):
            tok.save_pretrained(str(tmp / name))
        model.vae.save_pretrained(str(tmp / "vae"))
        unet_dir = tmp / "unet"
        unet_dir.mkdir()
        model.unet.save_config(str(unet_dir))
        save_file(cast_state(unet_state or model.unet.state_dict(), dtype), str(unet_dir / UNET_WEIGHTS))
        states = text_encoder_states or [None] * len(model.text_encoders)
        for name, te, state in zip(TEXT_ENCODER_DIRS, model.text_encoders, states):
            te.save_pretrained(str(tmp / name), state_dict=cast_state(state or te.state_dict(), dtype))
        _ordinary_permissions(tmp)
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / "previous")
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return path


def _ordinary_permissions(root: Path) -> None:
    """0o666/0o777 minus the umask (mkdtemp and safetensors leave owner-only modes)."""
    mask = current_umask()
    os.chmod(root, 0o777 & ~mask)
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            os.chmod(os.path.join(dirpath, d), 0o777 & ~mask)
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), 0o666 & ~mask)
