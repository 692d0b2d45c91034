"""Configs written by older versions of Atelier, brought up to date on every load (runs, presets, imports, resume).

Each saved config and preset carries `schema_version`. A file without one (hand-written, or an
sd-scripts config) is version 0, which has the same names as version 1 (sd-scripts' own names, which the kohya
adapter reads besides). When an option is renamed
or changes meaning, SCHEMA_VERSION goes up by one and MIGRATIONS gains the step from the old version:
a function from that version's flat {name: value} dict to the next version's.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainers.core.errors import ConfigIssue

SCHEMA_VERSION = 2

# Version 2: sd-scripts' t5xxl_max_token_length is text_encoder_max_tokens (a caption's length in tokens of the long
# text encoder, whichever encoder that is; sd-scripts' max_token_length, CLIP's, keeps its name and meaning).
RENAMED_IN_2: dict[str, str] = {"t5xxl_max_token_length": "text_encoder_max_tokens"}


def _renamed(names: dict[str, str]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def step(flat: dict[str, Any]) -> dict[str, Any]:
        return {names.get(key, key) if names.get(key, key) not in flat else key: value
                for key, value in flat.items()}
    return step


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    0: dict,
    1: _renamed(RENAMED_IN_2),
}


def version_of(raw: dict[str, Any], where: str, issues: list[ConfigIssue], current: int = SCHEMA_VERSION) -> int | None:
    """The file's schema_version (0 when absent); None, with an issue, when this Atelier cannot read it (`current`:
    the newest it reads; a job file's is trainers/core/options/jobs.py's)."""
    version = raw.get("schema_version", 0)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        issues.append(ConfigIssue("schema_version", f"{where}: got {version!r}; expected a whole number (the "
                                  f"version of Atelier's option names it was written with, {current} today)"))
        return None
    if version > current:
        issues.append(ConfigIssue("schema_version", f"{where} was written by a newer Atelier (schema_version "
                                  f"{version}; this one reads up to {current}): update Atelier to use it"))
        return None
    return version


def migrate(flat: dict[str, Any], version: int) -> dict[str, Any]:
    """`flat` (options of `version`) as today's options."""
    for v in range(version, SCHEMA_VERSION):
        flat = MIGRATIONS[v](flat)
    return flat
