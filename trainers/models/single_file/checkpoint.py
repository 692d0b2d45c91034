"""Reading a single-file checkpoint (.safetensors, or .ckpt in PyTorch's weights-only mode): names, shapes and
metadata first, tensors when needed."""
from __future__ import annotations

import os
import pickle
import re
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from trainers.core.fsio import read_safetensors_header
from trainers.models.rules import SINGLE_FILE_SUFFIXES, ModelLoadError


def is_single_file(path: str | os.PathLike) -> bool:
    return Path(path).suffix.lower() in SINGLE_FILE_SUFFIXES


@dataclass
class Checkpoint:
    path: Path
    shapes: dict[str, tuple[int, ...]]  # every tensor's name and shape, read without loading it
    metadata: dict[str, str] = field(default_factory=dict)  # safetensors __metadata__
    global_step: int | None = None  # .ckpt only
    _tensors: Callable[[str], Mapping[str, torch.Tensor]] | None = None

    def tensors(self, prefix: str = "") -> Mapping[str, torch.Tensor]:
        """The tensors whose names start with `prefix` (all by default); a .safetensors file reads only those."""
        assert self._tensors is not None
        return self._tensors(prefix)


def _load_ckpt(path: Path) -> tuple[Mapping[str, torch.Tensor], int | None]:
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except pickle.UnpicklingError as err:
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
        if not found:
            raise ModelLoadError(f"{path} cannot be read as a PyTorch checkpoint (damaged or not one)") from None
        raise ModelLoadError(
            f"{path} cannot be loaded safely: besides tensors it stores Python objects ({found[1]}), and unpickling "
            "them could run code from the file. Atelier loads .ckpt files only in PyTorch's weights-only mode. Use a "
            ".safetensors version of the model, or convert this file with a tool you trust.") from None
    except Exception as err:  # noqa: BLE001 - torch raises many types for a bad file
        raise ModelLoadError(f"{path} cannot be read as a PyTorch checkpoint ({type(err).__name__}: {err})") from None
    global_step = obj.get("global_step") if isinstance(obj, dict) else None
    while isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise ModelLoadError(f"{path} holds a {type(obj).__name__}, not a dictionary of weights")
    tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    return tensors, int(global_step) if isinstance(global_step, int) else None


def open_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """The names, shapes and metadata of a checkpoint's tensors; the tensors themselves load lazily."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ModelLoadError(f"{path} does not exist")
    if path.suffix.lower() == ".safetensors":
        try:
            shapes, metadata = read_safetensors_header(path, whole=True)
        except ValueError as err:
            raise ModelLoadError(str(err)) from None

        def load(prefix: str) -> Mapping[str, torch.Tensor]:
            from safetensors import safe_open

            with safe_open(str(path), framework="pt", device="cpu") as handle:
                return {k: handle.get_tensor(k) for k in handle.keys() if k.startswith(prefix)}

        return Checkpoint(path, shapes, metadata, None, load)
    tensors, global_step = _load_ckpt(path)  # mmap: nothing is read until used
    return Checkpoint(path, {k: tuple(v.shape) for k, v in tensors.items()}, {}, global_step,
                      lambda prefix: {k: v for k, v in tensors.items() if k.startswith(prefix)})
