"""How a test makes the fake family one of the families: detection (trainers.models.rules) reads its FAMILIES."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType

from trainers.core.registry import FamilySpec

SPEC = FamilySpec("fake", "tests.fake_family", "FAKE", "Fake")
# Set to "1" in a trainer's environment (with tests/helpers.hook_env) to register the fake family in that process.
FAKE_FAMILY_ENV = "ATELIER_TEST_FAKE_FAMILY"


def add_to(rules: ModuleType) -> None:
    """Register the fake family in `rules` (trainers.models.rules, just imported) for the rest of the process."""
    if SPEC not in rules.FAMILIES:
        rules.FAMILIES = rules.FAMILIES + (SPEC,)
    _clear_caches(rules)


@contextlib.contextmanager
def registered() -> Iterator[None]:
    """The fake family is a family while the block runs (detection finds its folders), and is gone after."""
    from trainers.models import rules

    before = rules.FAMILIES
    add_to(rules)
    try:
        yield
    finally:
        rules.FAMILIES = before
        _clear_caches(rules)


def _clear_caches(rules: ModuleType) -> None:
    import sys

    rules.all_rules.cache_clear()
    families = sys.modules.get("trainers.models.families")
    if families is not None:
        families.all_families.cache_clear()
