"""Presets: TOML configs of the options they name.

Built-in presets live in presets/ (read-only); user presets in a folder of their own. A built-in preset sets the
whole form, as kohya_ss's presets replace its config: what it does not name is back at its default, but for the
user's own fields (YOURS: the model, data and output paths, the output name, the words and prompts). A user
preset sets only the options it names (saved from a form, it may rely on keeping the rest).
Each carries `schema_version`; older versions are migrated (trainers/core/options/migrations.py),
newer ones are refused clearly.
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from trainers.core.fsio import atomic_write_text
from trainers.core.options import BY_NAME, ConfigError, TrainConfig, config_from_dict, toml_text
from trainers.core.options.loading import read_options
from trainers.core.options.migrations import SCHEMA_VERSION
from trainers.core.secrets import SECRET_KEY

BUILTIN_DIR = Path(__file__).resolve().parents[1] / "presets"

class PresetError(ValueError):
    pass


USER = "user: "  # how a user preset's value (not its label) is told from a built-in of the same name
# What a built-in preset leaves as the user set it: every path (the model, the data, where the result goes) and
# what names the user's subject, data and samples.
YOURS = frozenset({name for name, opt in BY_NAME.items() if opt.path}
                  | {"output_name", "token_string", "init_word", "class_prompt", "caption_extension",
                     "sample_prompt_lines"})


def _slug(name: str) -> str:
    """The file name of a preset called `name`: as typed, less what file systems refuse or misread."""
    slug = re.sub(r"\s+", " ", re.sub(r"[^\w\- ]+", "", name, flags=re.UNICODE)).strip()
    if not slug:
        raise PresetError(f"preset name {name!r} has no usable characters; use letters, digits, - or _")
    return slug


class Presets:
    def __init__(self, user_dir: Path, builtin_dir: Path = BUILTIN_DIR) -> None:
        self.user_dir = user_dir
        self.builtin_dir = builtin_dir

    def names(self, method: str) -> list[str]:
        """Presets usable by `method` (read from disk each time): the user's first (what they come back for, and
        what a list of a hundred built-ins would bury: the page's dropdown lists only its first hundred or so until
        a few letters are typed), then the built-ins."""
        found = []
        for prefix, folder in ((USER, self.user_dir), ("", self.builtin_dir)):
            for path in sorted(folder.glob("*.toml")) if folder.is_dir() else []:
                if _method_of(path) in (method, None):
                    found.append(prefix + path.stem)
        return found

    def choices(self, method: str) -> list[tuple[str, str]]:
        """(label, name) for a dropdown: the user's presets under the name they typed, built-ins marked."""
        return [(label(name), name) for name in self.names(method)]

    def _path(self, name: str) -> Path:
        if name.startswith(USER):
            return self.user_dir / f"{_slug(name[len(USER):])}.toml"
        return self.builtin_dir / f"{_slug(name)}.toml"

    def load(self, name: str, method: str) -> tuple[dict[str, Any], list[str]]:
        """(values it sets, warnings). Values are checked against the schema. A built-in's values are every option
        of `method` but YOURS: those it does not name at their defaults."""
        path = self._path(name)
        if not path.is_file():
            raise PresetError(f"preset {name!r} not found ({path})")
        values, warnings = read_partial(path, method, f"preset {name!r}")
        if name.startswith(USER):
            return values, warnings
        reset = {k: v for k, v in TrainConfig(method).values.items() if k not in values and k not in YOURS}
        said = ("the options it does not name are back at their defaults; your paths, output_name, words and "
                "prompts stay")
        return {**reset, **values}, [said, *warnings]

    def save(self, name: str, method: str, values: dict[str, Any]) -> str:
        """Save every non-empty value as a user preset; secrets are never written."""
        path = self.user_dir / f"{_slug(name)}.toml"
        kept = {k: v for k, v in values.items() if v is not None and k in BY_NAME and not SECRET_KEY.search(k)}
        text = toml_text.dumps({"schema_version": SCHEMA_VERSION, "method": method, **kept})
        atomic_write_text(path, f"# Atelier user preset\n{text}")
        return USER + path.stem

    def delete(self, name: str) -> None:
        if not name.startswith(USER):
            raise PresetError("built-in presets cannot be deleted; save your own copy instead")
        self._path(name).unlink(missing_ok=True)


def read_partial(path: Path, method: str, where: str) -> tuple[dict[str, Any], list[str]]:
    """(the values a config file names, checked against `method`'s schema; warnings). What the file does not name
    is not in the result: a preset or an imported file changes only the fields it sets."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise PresetError(f"{where} cannot be read: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise PresetError(f"{where} is not valid TOML: {err}") from None
    issues: list = []
    flat = read_options(raw, where, issues)
    warnings: list[str] = []
    try:
        cfg = config_from_dict(method, flat, issues, warnings)
    except ConfigError as err:
        raise PresetError(f"{where}: {err}") from None
    return {k: cfg.values[k] for k in flat if k in cfg.values}, warnings


def label(name: str) -> str:
    """What the page shows for preset `name`."""
    return name[len(USER):] if name.startswith(USER) else f"{name} (built-in)"


def _method_of(path: Path) -> str | None:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")).get("method")
    except (OSError, tomllib.TOMLDecodeError):
        return None
