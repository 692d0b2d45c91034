"""The job layer's option plumbing, one for every job beside training (generate, compare, tools, caption, masks):
its config file (TOML with `schema_version`, migrated on load), its command-line flags (one per option, also built
for training beside `--set`) and its docs table. Torch-free; imports only trainers.core.

A job's TOML carries `schema_version = JOB_SCHEMA_VERSION`; a file without one (hand-written, or written before
jobs had one) is version 0, which has today's names. When a job option is renamed, JOB_SCHEMA_VERSION goes up by one
and the job's migrations gain the step from the old version: a function from that version's flat {name: value}
dict to the next version's.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from trainers.core.options.loading import flatten, parse_set, read_toml
from trainers.core.options.migrations import version_of
from trainers.core.options.schema import ConfigIssue, Option

JOB_SCHEMA_VERSION = 1

Migration = Callable[[dict[str, Any]], dict[str, Any]]
Migrations = Mapping[int, Migration]
NO_MIGRATIONS: dict[int, Migration] = {0: dict}


# ---- config files ---------------------------------------------------------------------------------------------

def job_version(raw: dict[str, Any], where: str, issues: list[ConfigIssue]) -> int | None:
    """A job file's schema_version (0 when absent, and taken out of `raw`); None, with an issue, when this Atelier
    cannot read it."""
    version = version_of(raw, where, issues, JOB_SCHEMA_VERSION)
    raw.pop("schema_version", None)
    return version


def migrate_job(flat: dict[str, Any], version: int, migrations: Migrations = NO_MIGRATIONS) -> dict[str, Any]:
    """`flat` (a job's options of `version`) as today's options."""
    for v in range(version, JOB_SCHEMA_VERSION):
        flat = migrations[v](flat)
    return flat


def job_values(path: Path | None, overrides: list[str] | None, values: dict[str, Any] | None,
               groups: Mapping[str, str], options: Mapping[str, Option], issues: list[ConfigIssue],
               migrations: Migrations = NO_MIGRATIONS,
               header: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The flat {name: value} a job runs with: its TOML file (sections or flat keys, migrated from its
    schema_version), then `--set name=value` overrides, then `values` (the option flags). `header` reads (and
    removes) the file's own top-level keys first, e.g. a verb job's `verb`; problems go to `issues`."""
    flat: dict[str, Any] = {}
    if path is not None:
        raw = read_toml(path)
        version = job_version(raw, str(path), issues)
        if header is not None:
            header(raw)
        flat = flatten(raw, issues, groups, options)
        if version is not None:
            flat = migrate_job(flat, version, migrations)
    for assignment in overrides or []:
        name, value = parse_set(assignment)
        flat[name] = value
    flat.update(values or {})
    return flat


def job_header(title: str, **keys: Any) -> str:
    """The first lines of a job's TOML: its title as a comment, its schema_version and its own keys (`verb`)."""
    lines = [f"# Atelier {title}", f"schema_version = {JOB_SCHEMA_VERSION}"]
    lines += [f"{key} = {json.dumps(value, ensure_ascii=False)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n\n"


# ---- command-line flags ---------------------------------------------------------------------------------------

FLAG_PREFIX = "opt_"  # a job's option flags land in args.opt_<name>
_TYPES: dict[str, type] = {"int": int, "float": float}


def flag_name(opt: Option, singular: Mapping[str, str] | None = None) -> str:
    """`--<name>` with dashes; a list option by its singular (`--lora` for loras), since each flag adds one."""
    return "--" + (singular or {}).get(opt.name, opt.name).replace("_", "-")


def add_option_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, options: Iterable[Option],
                     singular: Mapping[str, str] | None = None, skip: Iterable[str] = (),
                     choices: bool = True) -> None:
    """One flag per option into `args.opt_<name>`: a list option repeatable, a bool one with its --no- form, the
    others typed by kind; with `choices`, argparse refuses a value outside an option's choices (else the job's own
    check does, recording it in the job folder)."""
    skipped = set(skip)
    for opt in options:
        if opt.name in skipped:
            continue
        flag, dest = flag_name(opt, singular), FLAG_PREFIX + opt.name
        if opt.kind == "list":
            parser.add_argument(flag, dest=dest, action="append", metavar="VALUE", help=f"{opt.help} (repeatable)")
        elif opt.kind == "bool":
            parser.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction, help=opt.help)
        else:
            parser.add_argument(flag, dest=dest, metavar=opt.kind.upper(), help=opt.help,
                                type=_TYPES.get(opt.kind, str),
                                choices=list(opt.choices) if choices and opt.choices else None)


def flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The options the command line's flags set (`add_option_flags`), by name."""
    return {key.removeprefix(FLAG_PREFIX): value for key, value in vars(args).items()
            if key.startswith(FLAG_PREFIX) and value is not None}


def add_job_arguments(parser: argparse.ArgumentParser, options: Iterable[Option], docs: str, default_dir: str,
                      singular: Mapping[str, str] | None = None, skip: Iterable[str] = (),
                      choices: bool = True) -> None:
    """A job's --config, --run-dir, --set, --print-config and one flag per option (`add_option_flags`)."""
    parser.add_argument("--config", type=Path, help=f"TOML file of the job's options (see {docs})")
    parser.add_argument("--run-dir", type=Path, help=f"job folder (default: {default_dir})")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                        help="set one option; VALUE is read as TOML")
    parser.add_argument("--print-config", action="store_true", help="print the resolved options and exit")
    add_option_flags(parser.add_argument_group("options (each also settable in the TOML file)"), options,
                     singular, skip, choices)


class _SetOption(argparse.Action):
    """A training option's own flag: it joins the --set list as `name=value`, in command-line order (so the last of
    `--set name=…` and `--name …` wins); a list option's flag adds one item each time it is given."""

    def __init__(self, option_strings: list[str], dest: str, option: Option, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.option = option

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, value: Any,
                 option_string: str | None = None) -> None:
        overrides: list[Any] = getattr(namespace, self.dest)
        name, kind = self.option.name, self.option.kind
        if kind == "bool":
            value = not (option_string or "").startswith("--no-")
        if kind == "list":
            items = getattr(namespace, "_flag_lists", {})
            items.setdefault(name, []).append(value)
            setattr(namespace, "_flag_lists", items)
            value = items[name]
            overrides[:] = [o for o in overrides if not (isinstance(o, str) and o.startswith(f"{name}="))]
        literal = json.dumps(value, ensure_ascii=False) if kind in ("str", "list", "bool") else str(value)
        overrides.append(f"{name}={literal}")


def add_training_flags(parser: argparse.ArgumentParser, options: Iterable[Option]) -> None:
    """Training's per-option flags beside --set (`--learning-rate 1e-4` is `--set learning_rate=1e-4`): each joins
    `args.overrides`, so a config file, --set, --unset and these flags are read by one loader. A name the command's
    own flags already take (--config) gets none."""
    taken = set(parser._option_string_actions)
    group = parser.add_argument_group("options (each also settable in the TOML file or with --set)")
    for opt in options:
        flag = flag_name(opt)
        if flag in taken or "--no-" + flag[2:] in taken:
            continue
        if opt.kind == "bool":
            group.add_argument(flag, "--no-" + flag[2:], dest="overrides", action=_SetOption, option=opt, nargs=0,
                               help=opt.help)
        else:
            group.add_argument(flag, dest="overrides", action=_SetOption, option=opt, metavar=opt.kind.upper(),
                               help=opt.help + (" (repeatable)" if opt.kind == "list" else ""),
                               choices=list(opt.choices) if opt.choices and opt.kind == "str" else None)


# ---- docs -----------------------------------------------------------------------------------------------------

Section = tuple[str, Iterable[Option]]  # (heading, options); an empty heading gives the table alone


def _default(opt: Option, methods: bool) -> str:
    """An option's default as TOML writes it (JSON's form for these kinds), with each method's own after it."""
    shown = "unset" if opt.default is None else json.dumps(opt.default, ensure_ascii=False)
    if methods:
        shown += "".join(f"; {m}: {json.dumps(d, ensure_ascii=False)}" for m, d in opt.method_defaults)
    return shown


def options_table(options: Iterable[Option], heading: str = "", methods: bool = False) -> list[str]:
    """Options as a Markdown table (option, default, accepts, what), under `heading` when given; with `methods`,
    a column of the training methods that read each and their own defaults beside the shared one."""
    lines = [heading, ""] if heading else []
    if methods:
        lines += ["| option | default | accepts | methods | what |", "|---|---|---|---|---|"]
    else:
        lines += ["| option | default | accepts | what |", "|---|---|---|---|"]
    for opt in options:
        cells = [f"`{opt.name}`", f"`{_default(opt, methods)}`", opt.allowed()]
        if methods:
            cells.append(", ".join(sorted(opt.methods)))
        cells.append(opt.help.replace("|", "\\|"))  # a bare | would end the cell
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def options_markdown(sections: Iterable[Section], methods: bool = False) -> str:
    """The docs tables of training (docs/options.md) and of every job (docs/generate.md, tools.md, captioning.md):
    one table a section, each under its heading and followed by a blank line."""
    lines: list[str] = []
    for heading, options in sections:
        lines += options_table(options, heading, methods) + [""]
    return "\n".join(lines)
