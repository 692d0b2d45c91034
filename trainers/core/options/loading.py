"""TrainConfig, and reading it from TOML (sectioned or flat sd-scripts) and `--set` overrides."""
from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.core.options import kohya_compat, toml_text
from trainers.core.options.migrations import SCHEMA_VERSION, migrate, version_of
from trainers.core.options.schema import GROUPS, coerce
from trainers.core.options.training import BY_NAME, options_for
from trainers.core.options.values import OptionValues
from trainers.core.secrets import SECRET_KEY, redact


class TrainConfig(OptionValues):
    """The resolved options of one run: every option of the method, with its value."""

    def __init__(self, method: str, values: dict[str, Any] | None = None) -> None:
        self.__dict__["method"] = method
        super().__init__(options_for(method), values)

    def _unknown(self, name: str) -> str:
        return f"option {name!r} is not used by method {self.method!r}"

    def replace(self, **changes: Any) -> "TrainConfig":
        return TrainConfig(self.method, {**self.values, **changes})

    def to_toml(self) -> str:
        """Every option, sectioned by group. Unset (None) options are left out."""
        header = {"schema_version": SCHEMA_VERSION, "method": self.method}
        return redact(f"# Atelier {self.method} config\n" + toml_text.dumps({**header, **self.sections(GROUPS)}))


def closest(name: str, candidates: list[str]) -> str | None:
    found = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return found[0] if found else None


def _unknown(name: str, method: str) -> ConfigIssue:
    guess = closest(name, list(BY_NAME) + list(GROUPS))
    hint = f"; did you mean {guess!r}?" if guess else "; see docs/options.md for the list of options"
    return ConfigIssue(name if name.strip() else repr(name), f"unknown option {name!r}{hint}")


def read_options(raw: dict[str, Any], where: str, issues: list[ConfigIssue]) -> dict[str, Any]:
    """The options of a loaded TOML document (a config, preset or import) as today's flat {name: value}.

    Migrations from the file's schema_version run here, so every way a config is read gets them; a file
    written by a newer Atelier adds an issue instead.
    """
    version = version_of(raw, where, issues)
    flat = flatten(raw, issues)
    return migrate(flat, version) if version is not None else flat


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file as data; a ConfigError naming `--config` when it is missing or not TOML."""
    path = Path(path)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError([ConfigIssue("--config", f"file not found: {path}")]) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError([ConfigIssue("--config", f"{path} is not valid TOML: {err}")]) from None
    except RecursionError:
        raise ConfigError([ConfigIssue("--config", f"{path} nests tables or lists too deeply to be a config")]) from None
    except OSError as err:
        raise ConfigError([ConfigIssue("--config", f"{path} cannot be read ({err.strerror or err})")]) from None
    except ValueError as err:  # a NUL character in the path
        raise ConfigError([ConfigIssue("--config", f"{str(path)!r} cannot be a file name ({err})")]) from None


def flatten(raw: dict[str, Any], issues: list[ConfigIssue], groups: Mapping[str, str] = GROUPS,
            names: Mapping[str, Any] = BY_NAME) -> dict[str, Any]:
    """Accept both `[group]` sections and flat keys (as sd-scripts writes them), returning one flat dict."""
    flat: dict[str, Any] = {}
    for key, value in raw.items():
        if key in ("method", "schema_version"):
            continue
        if key in groups and isinstance(value, dict):
            items = value.items()
        elif isinstance(value, dict) and key not in names:
            guess = closest(key, list(groups))
            hint = f"; did you mean [{guess}]?" if guess else f"; sections are {', '.join(groups)}"
            issues.append(ConfigIssue(key if key.strip() else repr(key), f"unknown section [{key}]{hint}"))
            continue
        else:
            items = [(key, value)]
        for name, val in items:
            if name in flat:
                issues.append(ConfigIssue(name, f"{name!r} is given twice; keep one"))
            flat[name] = val
    return flat


def parse_set(assignment: str) -> tuple[str, Any]:
    """Parse one `--set name=value`; the value is read as TOML, else taken as text."""
    name, sep, text = assignment.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ConfigError([ConfigIssue(assignment, "expected --set name=value")])
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError):
        value = text
    return name, value


def config_from_dict(method: str, flat: dict[str, Any], issues: list[ConfigIssue] | None = None,
                     warnings: list[str] | None = None) -> TrainConfig:
    """Check names and types of `flat` (name -> value) against the schema; raise ConfigError on problems."""
    issues = [] if issues is None else issues
    warnings = [] if warnings is None else warnings
    values: dict[str, Any] = {}
    translated: dict[str, Any] = {}
    if "network_args" in BY_NAME and method in BY_NAME["network_args"].methods:
        flat = dict(flat)
        kohya_compat.lift_network_args(flat, issues)
    for name, value in flat.items():
        if name in kohya_compat.TRANSLATED and not (name in BY_NAME and method in BY_NAME[name].methods):
            problems: list[str] = []
            kohya_compat.TRANSLATED[name](value, translated, problems)
            issues.extend(ConfigIssue(name, p) for p in problems)
        elif name in kohya_compat.IGNORED:
            warnings.append(f"{name} (sd-scripts) is ignored: {kohya_compat.IGNORED[name]}")
        elif name not in BY_NAME and SECRET_KEY.search(name):
            issues.append(ConfigIssue(name, "secrets are never read from config files (they would be saved and "
                                      "shared with it); set HF_TOKEN or WANDB_API_KEY in the environment instead"))
        elif name not in BY_NAME:
            issues.append(_unknown(name, method))
        elif method not in BY_NAME[name].methods:
            warnings.append(f"{name} is not used by {method} training and is ignored")
        else:
            values[name] = value
    for name, value in translated.items():
        values.setdefault(name, value)
    for name, value in list(values.items()):
        opt = BY_NAME[name]
        try:
            values[name] = coerce(opt, value)
        except ValueError as err:
            issues.append(ConfigIssue(name, str(err), opt.group))
    if issues:
        raise ConfigError(issues)
    return TrainConfig(method, values)


def load_config(method: str, path: Path | None = None, overrides: list[str] | None = None,
                warnings: list[str] | None = None) -> TrainConfig:
    """Load a TOML file (sectioned or flat sd-scripts) and apply `--set` overrides."""
    issues: list[ConfigIssue] = []
    flat: dict[str, Any] = {}
    if path is not None:
        raw = read_toml(path)
        written_for = raw.get("method")
        if isinstance(written_for, str) and written_for != method and warnings is not None:
            warnings.append(f"{path} was written for {written_for} training and is run as {method}: options only "
                            f"{written_for} uses are ignored")
        flat = read_options(raw, str(path), issues)
    for assignment in overrides or []:
        name, value = parse_set(assignment)
        flat[name] = value
    return config_from_dict(method, flat, issues, warnings)
