"""The model families listed in trainers/core/registry.py, imported when first asked for."""
from __future__ import annotations

import functools
import importlib

from trainers.core.registry import FAMILIES
from trainers.models.base import ModelFamily


@functools.cache
def all_families() -> tuple[ModelFamily, ...]:
    """Every family, the most specific first (the order detection asks them in)."""
    found = [getattr(importlib.import_module(spec.module), spec.attribute) for spec in FAMILIES]
    return tuple(sorted(found, key=lambda f: -f.detect_priority))


def family(name: str) -> ModelFamily:
    for f in all_families():
        if f.name == name:
            return f
    raise KeyError(f"unknown model family {name!r}; known: {', '.join(spec.name for spec in FAMILIES)}")
