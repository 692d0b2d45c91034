"""The adapter tests' config files: a TOML text written where a test's import reads it."""
from __future__ import annotations

from pathlib import Path


def write_toml(tmp_path: Path, text: str, name: str = "musubi.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path
