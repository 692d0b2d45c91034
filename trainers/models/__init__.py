"""Model families as plug-ins: detect which one a model is, then load it through that plug-in.

A family is one folder (trainers/models/<family>/: its torch-free FamilyRules in `rules.py`, its ModelFamily in
`family.py`, its torch-free option declarations in `options.py`) plus one line in trainers/core/registry.py.
Single-file checkpoints are read and written by `single_file/`. What a model's options need before it loads is
checked by `checks.py` (torch-free).

Importing this package loads no torch, so that the rules and checks serve the GUI's Validate; the names below
load their modules (and torch) when first used.
"""
from __future__ import annotations

import importlib
from typing import Any

_HOME = {
    "CheckpointKeys": "rules", "ModelFiles": "rules", "ModelLoadError": "rules",
    "LoadedModel": "base", "ModelFamily": "base", "SizeConditioning": "base",
    "all_families": "families", "family": "families",
    "SINGLE_FILE_SUFFIXES": "single_file", "load_single_file": "single_file", "save_full_model": "single_file",
    "detect_family": "loading", "load_model": "loading", "resolve_model_folder": "loading",
}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
