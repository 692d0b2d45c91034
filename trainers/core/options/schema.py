"""The option declaration type and the value checks derived from it.

Each option is declared once (see options.py); TOML load/save, CLI overrides, validation,
the GUI widgets and the docs table are all computed from these declarations.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from trainers.core.errors import ConfigError, ConfigIssue  # noqa: F401 - re-exported
from trainers.core.registry import METHOD_NAMES

ALL_METHODS: frozenset[str] = frozenset(METHOD_NAMES)

# The shared sections (section id, title shown in the GUI and docs), in order; methods may add their own
# (trainers.core.options.training.GROUPS has them all).
GROUPS: dict[str, str] = {
    "model": "Model",
    "dataset": "Dataset",
    "network": "Network",
    "training": "What to train",
    "optimizer": "Optimizer and schedule",
    "loss": "Loss, noise and timesteps",
    "flow": "Flow matching",
    "precision": "Precision and memory",
    "sampling": "Sample images",
    "saving": "Saving",
    "logging": "Logging",
    "launch": "Multi-GPU launch",
}

Kind = Literal["bool", "int", "float", "number", "str", "list"]


@dataclass(frozen=True)
class Option:
    name: str
    kind: Kind
    default: Any
    help: str
    group: str
    methods: frozenset[str] = ALL_METHODS
    choices: tuple[str, ...] | None = None
    min: float | None = None
    max: float | None = None
    nullable: bool = False  # None (left out of the TOML) is a valid value
    required: bool = False  # must be non-empty before training starts
    path: Literal["dir", "file", "any", "out"] | None = None  # checked on disk by validation
    advanced: bool = False  # shown collapsed in the GUI
    method_defaults: tuple[tuple[str, Any], ...] = ()  # (method, default) where a method's default differs
    pattern: str | None = None  # with choices: other values matching this regex are accepted too (kept as typed)
    pattern_help: str = ""  # what `pattern` accepts, in words
    per_encoder: bool = False  # a number, or a list of one per text encoder (sd-scripts' text_encoder_lr [te1, te2])

    def for_method(self, method: str) -> "Option":
        """This option as `method` sees it (its own default)."""
        own = dict(self.method_defaults)
        return replace(self, default=own[method]) if method in own else self

    def allowed(self) -> str:
        """Human description of what this option accepts."""
        if self.choices:
            text = "one of " + ", ".join(repr(c) for c in self.choices)
            if self.pattern:
                text += f", or {self.pattern_help or 'a value matching ' + repr(self.pattern)}"
        else:
            text = {
                "bool": "true or false",
                "int": "a whole number",
                "float": "a number",
                "number": "a number",
                "str": "a text value",
                "list": "a list of text values",
            }[self.kind]
            if self.per_encoder:
                text += " (or a list, one per text encoder)"
            if self.min is not None and self.max is not None:
                text += f" from {_fmt(self.min)} to {_fmt(self.max)}"
            elif self.min is not None:
                text += f" >= {_fmt(self.min)}"
            elif self.max is not None:
                text += f" <= {_fmt(self.max)}"
        if self.nullable:
            text += " (or leave it unset)"
        return text


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def coerce(opt: Option, value: Any) -> Any:
    """Return `value` as the option's type or raise ConfigIssue-carrying ValueError."""
    bad = ValueError(f"got {value!r}; expected {opt.allowed()}")
    if value is None:
        if opt.nullable:
            return None
        raise bad
    if opt.kind == "bool":
        if isinstance(value, bool):
            return value
        raise bad
    if opt.kind == "list":
        if isinstance(value, str):  # CLI convenience: "a,b" or a single value
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
            raise bad
        return [str(v) for v in value]
    if opt.kind == "str":
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # e.g. resolution = 512, as sd-scripts configs write it
        if not isinstance(value, str):
            raise bad
        if opt.choices and value not in opt.choices:
            match = next((c for c in opt.choices if c.lower() == value.lower()), None)
            if match is None and not (opt.pattern and re.fullmatch(opt.pattern, value)):
                raise bad
            value = match or value
        return value
    # numbers
    if opt.per_encoder and isinstance(value, str) and "," in value:  # typed in the page: "5e-5, 1e-5"
        try:
            value = [float(v) for v in value.split(",") if v.strip()]
        except ValueError:
            raise bad from None
    if opt.per_encoder and isinstance(value, list):
        if not 1 <= len(value) <= 2:
            raise bad
        values = [coerce(replace(opt, per_encoder=False, nullable=False), v) for v in value]
        return values[0] if len(values) == 1 else values
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad
    if opt.kind == "int":
        if isinstance(value, float):
            if not value.is_integer():
                raise bad
            value = int(value)
    else:
        try:
            finite = math.isfinite(float(value))
        except OverflowError:  # an integer beyond any float
            finite = False
        if not finite:
            raise bad
        if opt.kind == "float":
            value = float(value)
    if (opt.min is not None and value < opt.min) or (opt.max is not None and value > opt.max):
        raise bad
    return value


def coerce_values(options: Mapping[str, Option], values: Mapping[str, Any],
                  unknown: Callable[[str], ConfigIssue]) -> dict[str, Any]:
    """{name: value} as their options' types; ConfigError names every bad value and every unknown name (the issue
    `unknown` makes for it)."""
    issues: list[ConfigIssue] = []
    checked: dict[str, Any] = {}
    for name, value in values.items():
        opt = options.get(name)
        if opt is None:
            issues.append(unknown(name))
            continue
        try:
            checked[name] = coerce(opt, value)
        except ValueError as err:
            issues.append(ConfigIssue(name, str(err), opt.group))
    if issues:
        raise ConfigError(issues)
    return checked
