"""Options of jobs that have verbs (`tools <verb>`, `caption`, `masks`): a config per verb, read from a TOML file
(sections or flat keys), `--set` overrides and values, each name and type checked. Torch-free."""
from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Self

from trainers.core.options import toml_text
from trainers.core.options.jobs import NO_MIGRATIONS, Migrations, job_header, job_values
from trainers.core.options.loading import closest
from trainers.core.options.schema import ConfigError, ConfigIssue, Option, coerce_values
from trainers.core.options.values import OptionValues


class VerbConfig(OptionValues):
    """One verb's options with their values (defaults filled in). A subclass says where its verbs' options are
    (`options_for`), its TOML sections (`groups`), the command before the verb (`command`, e.g. "tools "), what
    its TOML's first line calls it (`title`) and the steps from its older schema_versions (`migrations`)."""

    groups: ClassVar[dict[str, str]] = {}
    command: ClassVar[str] = ""
    title: ClassVar[str] = "job"
    migrations: ClassVar[Migrations] = NO_MIGRATIONS

    def __init__(self, verb: str, values: dict[str, Any] | None = None) -> None:
        super().__init__(self.options_for(verb), values)
        self.__dict__["verb"] = verb

    @classmethod
    def options_for(cls, verb: str) -> tuple[Option, ...]:
        raise NotImplementedError

    def _unknown(self, name: str) -> str:
        return f"{self.command}{self.verb} has no option {name!r}"

    def replace(self, **changes: Any) -> "VerbConfig":
        return type(self)(self.verb, {**self.values, **changes})

    def to_toml(self) -> str:
        return job_header(self.title, verb=self.verb) + toml_text.dumps(self.sections(self.groups))

    @classmethod
    def from_values(cls, verb: str, values: dict[str, Any]) -> Self:
        """Check names and types of {name: value}; ConfigError names every bad field."""
        options = {o.name: o for o in cls.options_for(verb)}

        def unknown(name: str) -> ConfigIssue:
            guess = closest(name, list(options))
            hint = f"; did you mean {guess!r}?" if guess else f"; see `python -m trainers {cls.command}{verb} --help`"
            return ConfigIssue(name, f"{cls.command}{verb} has no option {name!r}{hint}")

        return cls(verb, coerce_values(options, values, unknown))

    @classmethod
    def load(cls, verb: str, path: Path | None = None, overrides: list[str] | None = None,
             values: dict[str, Any] | None = None) -> Self:
        """A job's TOML (sections or flat keys, migrated from its schema_version; its `verb` must be this one),
        then `--set` overrides, then `values` (trainers/core/options/jobs.py reads them)."""
        issues: list[ConfigIssue] = []

        def header(raw: dict[str, Any]) -> None:
            written = raw.pop("verb", verb)
            if written != verb:
                issues.append(ConfigIssue("verb", f"{path} is a `{cls.command}{written}` job; run it with "
                                                  f"`{cls.command}{written}`"))

        flat = job_values(path, overrides, values, cls.groups, {o.name: o for o in cls.options_for(verb)}, issues,
                          cls.migrations, header)
        try:
            cfg = cls.from_values(verb, flat)
        except ConfigError as err:
            raise ConfigError(issues + err.issues) from None
        if issues:
            raise ConfigError(issues)
        return cfg
