"""The model families listed in trainers/core/registry.py, imported when first asked for."""
from __future__ import annotations

import functools

from trainers.models.base import ModelFamily
from trainers.models.rules import named, plugins


@functools.cache
def all_families() -> tuple[ModelFamily, ...]:
    """Every family, the most specific first (the order detection asks them in)."""
    return plugins(lambda spec: spec.module)


def family(name: str) -> ModelFamily:
    return named(name, all_families())
