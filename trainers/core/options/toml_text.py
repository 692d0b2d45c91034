"""TOML text from plain data, for every file we write (configs, presets, generation jobs).

tomlkit escapes what the older `toml` package mangles or crashes on (control characters pasted
into a text field), and everything it writes loads back equal with the standard library's tomllib.
"""
from __future__ import annotations

from typing import Any

import tomlkit


def dumps(data: dict[str, Any]) -> str:
    """`data` (tables of str, int, float, bool and lists of them; no None) as TOML text."""
    return tomlkit.dumps(data)
