"""Named option values with defaults filled in: the shared base of TrainConfig and GenerateConfig."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trainers.core.options.schema import Option


class OptionValues:
    """Read-only attributes over `values` (every option, defaults filled in); `replace()` makes a changed copy."""

    def __init__(self, options: Iterable[Option], values: dict[str, Any] | None = None) -> None:
        options = tuple(options)
        self.__dict__["options"] = options
        self.__dict__["values"] = {o.name: list(o.default) if isinstance(o.default, list) else o.default
                                   for o in options}
        self.values.update(values or {})

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(self._unknown(name)) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only; use replace()")

    def _unknown(self, name: str) -> str:
        return f"no option {name!r}"

    def sections(self, groups: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Set values by group, groups in the given order; unset (None) options are left out."""
        by_group: dict[str, dict[str, Any]] = {}
        for opt in self.options:
            if self.values[opt.name] is not None:
                by_group.setdefault(opt.group, {})[opt.name] = self.values[opt.name]
        return {g: by_group[g] for g in groups if g in by_group}

    def to_toml(self) -> str:
        raise NotImplementedError

    def save(self, path: Path) -> None:
        from trainers.core.fsio import atomic_write_text

        atomic_write_text(Path(path), self.to_toml())
