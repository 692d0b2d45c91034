"""The page's title line, from the registries: a method or family added there is named here without an edit."""
from __future__ import annotations

from trainers.core.registry import FAMILIES, METHODS
from trainers.models.rules import rules_of


def _listed(words: list[str]) -> str:
    return words[0] if len(words) < 2 else f"{', '.join(words[:-1])} and {words[-1]}"


def title_line() -> str:
    """What the page says it trains: every method's tab title and every model family's title, in registry order."""
    families = list(dict.fromkeys(rules_of(f.name).title for f in FAMILIES))
    return f"Train {_listed([m.title for m in METHODS])} for {_listed(families)}."
