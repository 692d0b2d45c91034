"""TrainConfig, and reading it from TOML (sectioned or flat sd-scripts) and `--set` overrides."""
from __future__ import annotations

import difflib
import importlib
import tomllib
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.core.options import toml_text
from trainers.core.options.migrations import SCHEMA_VERSION, migrate, version_of
from trainers.core.options.schema import coerce
from trainers.core.options.training import BY_NAME, GROUPS, options_for
from trainers.core.options.values import OptionValues
from trainers.core.paths import windows_path
from trainers.core.prompts import prompts_file_missing
from trainers.core.registry import CONFIG_ADAPTERS, SD_SCRIPTS_ADAPTER
from trainers.core.secrets import SECRET_KEY, redact


class TrainConfig(OptionValues):
    """The resolved options of one run: every option of the method, with its value."""

    def __init__(self, method: str, values: dict[str, Any] | None = None) -> None:
        self.__dict__["method"] = method
        # The options that were set (by a file, the page or --set); the others have their defaults.
        self.__dict__["given"] = frozenset(values or ())
        super().__init__(options_for(method), values)

    def _unknown(self, name: str) -> str:
        return f"option {name!r} is not used by method {self.method!r}"

    def replace(self, **changes: Any) -> "TrainConfig":
        changed = TrainConfig(self.method, {**self.values, **changes})
        changed.__dict__["given"] = self.given | frozenset(changes)
        return changed

    def to_toml(self) -> str:
        """Every option, sectioned by group. Unset (None) options are left out."""
        header = {"schema_version": SCHEMA_VERSION, "method": self.method}
        return redact(f"# Atelier {self.method} config\n" + toml_text.dumps({**header, **self.sections(GROUPS)}))


def sd_scripts_adapter() -> ModuleType:
    """The adapter of sd-scripts' and kohya_ss's formats (registry.SD_SCRIPTS_ADAPTER): their keys in any flat
    config, kohya_ss's JSON, and the flat TOML that no other adapter claims."""
    return importlib.import_module(SD_SCRIPTS_ADAPTER)


def closest(name: str, candidates: list[str]) -> str | None:
    found = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return found[0] if found else None


def _unknown(name: str, method: str) -> ConfigIssue:
    guess = closest(name, list(BY_NAME) + list(GROUPS))
    hint = f"; did you mean {guess!r}?" if guess else "; see docs/options.md for the list of options"
    return ConfigIssue(name if name.strip() else repr(name), f"unknown option {name!r}{hint}")


def read_options(raw: dict[str, Any], where: str, issues: list[ConfigIssue],
                 notes: list[str] | None = None) -> dict[str, Any]:
    """The options of a loaded TOML document (a config, preset or import) as today's flat {name: value}.

    Migrations from the file's schema_version run here, so every way a config is read gets them; a file
    written by a newer Atelier adds an issue instead. With `notes`, sections that are not ours are read as
    sd-scripts reads every section (see `flatten`).
    """
    version = version_of(raw, where, issues)
    flat = flatten(raw, issues, notes=notes)
    return migrate(flat, version) if version is not None else flat


def is_sd_scripts_file(raw: dict[str, Any]) -> bool:
    """Whether a TOML document is an sd-scripts `--config_file` rather than one of ours: it has no schema_version
    or method, and it is flat or has a section that is not one of ours."""
    if "schema_version" in raw or "method" in raw:
        return False
    sections = [key for key, value in raw.items() if isinstance(value, dict) and key not in BY_NAME]
    return not sections or any(key not in GROUPS for key in sections)


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
            names: Mapping[str, Any] = BY_NAME, notes: list[str] | None = None) -> dict[str, Any]:
    """Accept both `[group]` sections and flat keys (as sd-scripts writes them), returning one flat dict.

    With `notes`, a section that is not one of `groups` is read as sd-scripts reads every section of a
    `--config_file`: its keys are flat keys (one note names such sections); without, it is an error.
    """
    flat: dict[str, Any] = {}
    where: dict[str, str] = {}
    foreign: list[str] = []
    misplaced: list[str] = []
    for key, value in raw.items():
        if key in ("method", "schema_version"):
            continue
        section = ""
        if isinstance(value, dict) and (key in groups or key not in names):
            if key not in groups and notes is None:
                guess = closest(key, list(groups))
                hint = f"; did you mean [{guess}]?" if guess else f"; sections are {', '.join(groups)}"
                issues.append(ConfigIssue(key if key.strip() else repr(key), f"unknown section [{key}]{hint}"))
                continue
            if key not in groups:
                foreign.append(key)
            items, section = list(value.items()), f"[{key}]"
        else:
            items = [(key, value)]
        for name, val in items:
            if name in flat and flat[name] != val:
                first, second = where[name] or "top level", section or "top level"
                issues.append(ConfigIssue(name if name.strip() else repr(name), f"{name!r} is given twice with "
                                          f"different values ({first}: "
                                          f"{flat[name]!r}, {second}: {val!r}); keep one"))
            flat[name], where[name] = val, section
            home = getattr(names.get(name), "group", None)
            if key in groups and home is not None and home != key:
                misplaced.append(f"{name} is in [{key}] but belongs in [{home}]")
    if foreign and notes is not None:
        notes.append(_foreign_sections_note(foreign, groups))
    if misplaced and notes is not None:
        notes.append("; ".join(misplaced) + ": read anyway (sections only group options), but check it was meant")
    return flat


def _foreign_sections_note(foreign: list[str], groups: Mapping[str, str]) -> str:
    typos = [f"[{key}] (did you mean [{guess}]?)" for key in foreign if (guess := closest(key, list(groups)))]
    shown = ", ".join(f"[{key}]" for key in foreign[:6]) + (", ..." if len(foreign) > 6 else "")
    text = (f"section names {shown} are not Atelier's: their keys are read as flat keys, as sd-scripts reads every "
            "section of a --config_file")
    return text + (f"; {', '.join(typos)}" if typos else "")


class Unset(str):
    """`--unset NAME` among the command line's overrides (kept in order with the `--set` assignments): the option
    is read as if the config file did not set it (its default; for an sd-scripts file, sd-scripts' default)."""


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
                     warnings: list[str] | None = None, foreign: Collection[str] = ()) -> TrainConfig:
    """Check names and types of `flat` (name -> value) against the schema; raise ConfigError on problems.

    `foreign`: the keys that come from an sd-scripts or kohya_ss file. Those that are nothing here are warned about
    (first of all warnings) and ignored, as sd-scripts ignores unknown keys of a --config_file; other unknown names
    are errors. A sample_prompts file that is not there is kept, with a warning: sd-scripts trains on without its
    samples, and so does the run.
    """
    issues = [] if issues is None else issues
    warnings = [] if warnings is None else warnings
    values: dict[str, Any] = {}
    translated: dict[str, Any] = {}
    ignored: list[str] = []

    def warn(text: str) -> None:
        if text not in warnings:
            warnings.append(text)

    kohya = sd_scripts_adapter()
    if "network_args" in BY_NAME and method in BY_NAME["network_args"].methods:
        flat = dict(flat)
        kohya.lift_network_args(flat, issues)
    refused, handled = kohya.refusals(flat)
    issues.extend(refused)
    for name, value in flat.items():
        ours = name in BY_NAME and method in BY_NAME[name].methods
        if name in handled:
            continue
        if ours:  # an option wins over an sd-scripts table entry of the same name
            values[name] = value
        elif name in kohya.TRANSLATED:
            if kohya.blank(value):
                continue
            problems: list[str] = []
            kohya.TRANSLATED[name](value, translated, problems)
            issues.extend(ConfigIssue(name, p) for p in problems)
        elif name in kohya.IGNORED:
            if not kohya.blank(value):
                warn(f"{name} (sd-scripts) is ignored: {kohya.IGNORED[name]}")
        elif name not in BY_NAME and SECRET_KEY.search(name):
            if not kohya.blank(value):
                issues.append(ConfigIssue(name, "secrets are never read from config files (they would be saved and "
                                          "shared with it); set HF_TOKEN or WANDB_API_KEY in the environment instead"))
        elif name not in BY_NAME and name in foreign:
            ignored.append(name)
        elif name not in BY_NAME:
            issues.append(_unknown(name, method))
        else:
            warn(f"{name} is not used by {method} training and is ignored")
    if ignored:
        warnings.insert(0, kohya.ignored_keys_warning(ignored, BY_NAME, "keys that are not options here "
                                                           "(sd-scripts ignores unknown keys of a --config_file) are"))
    for name, value in translated.items():
        values.setdefault(name, value)
    for name, value in list(values.items()):
        opt = BY_NAME[name].for_method(method)
        if value is False and opt.kind == "str" and opt.default == "":
            values[name] = ""  # sd-scripts reads a false path (resume = false) as none
            warn(f"{name} = false is read as no {name} (unset), as sd-scripts reads it")
            continue
        try:
            values[name] = coerce(opt, value)
        except ValueError as err:
            issues.append(ConfigIssue(name, str(err), opt.group))
    if issues:
        raise ConfigError(issues)
    _missing_prompts_file(values, warnings)
    return TrainConfig(method, values)


def _missing_prompts_file(values: dict[str, Any], warnings: list[str]) -> None:
    """sd-scripts trains on without samples when its sample_prompts file is not there (it logs an error at each
    sample step): so does Atelier, saying so once. The name stays in the config (a file that appears later is
    sampled); other path problems are the path check's."""
    text = str(values.get("sample_prompts") or "").strip()
    if windows_path(text) or not prompts_file_missing(text):
        return
    lines = bool(values.get("sample_prompt_lines"))
    what = "its prompts are left out (sample_prompt_lines are still sampled)" if lines else "samples are off"
    warnings.append(f"sample_prompts: file not found: {text}; training goes on without it, as in sd-scripts: {what}. "
                    "Give an existing prompts file to sample it")


def read_config_options(method: str, path: Path | None, overrides: list[str], notes: list[str],
                        issues: list[ConfigIssue]) -> tuple[dict[str, Any], frozenset[str]]:
    """(the flat options a config file and the overrides set, read with the file's meaning; the keys that came from
    an sd-scripts or kohya_ss file, which config_from_dict warns about rather than refuses when unknown)."""
    flat: dict[str, Any] = {}
    sd_scripts = False
    written_for: Any = None
    if path is not None and Path(path).suffix.lower() == ".json":
        converted = sd_scripts_adapter().read_json_file(Path(path), issues)
        if converted is not None:
            written_for, flat, sd_scripts = converted.method, converted.options, True
            notes.extend(n for n in converted.notes if n not in notes)
    elif path is not None:
        raw = read_toml(path)
        written_for = raw.get("method")
        sd_scripts = is_sd_scripts_file(raw)
        flat = read_options(raw, str(path), issues, notes)
    if isinstance(written_for, str) and written_for != method:
        notes.append(f"{path} was written for {written_for} training and is run as {method}: options only "
                     f"{written_for} uses are ignored")
    foreign = frozenset(flat) if sd_scripts else frozenset()
    _drop_windows_outputs(flat, {str(a).partition("=")[0].strip() for a in overrides or []}, notes)
    unset: set[str] = set()
    for assignment in overrides or []:
        if isinstance(assignment, Unset):
            _check_unset(assignment, method, issues)
            flat.pop(assignment, None)
            unset.add(assignment)
            continue
        name, value = parse_set(assignment)
        flat[name] = value
        unset.discard(name)
    if sd_scripts:
        flat = foreign_reader(flat)(flat, method, notes, issues)
        for name in unset & set(flat):  # set again by sd-scripts' default for what a file leaves out
            notes.append(f"--unset {name}: {name} = {flat[name]!r}, sd-scripts' default")
    return flat, foreign


def windows_outputs(flat: dict[str, Any]) -> list[str]:
    """The output folders (path kind "out") that `flat` gives as Windows paths: a config written on another
    machine."""
    return [name for name, value in flat.items() if name in BY_NAME and BY_NAME[name].path == "out"
            and isinstance(value, str) and windows_path(value)]


def _drop_windows_outputs(flat: dict[str, Any], overridden: set[str], notes: list[str]) -> None:
    """A config written on Windows loads here: its output folders are read as their defaults, said by name (output_dir
    has none: it is asked for); its inputs stay, and the path check names each as not on this machine."""
    dropped = [f"{name} = {flat.pop(name)!r}" for name in windows_outputs(flat) if name not in overridden]
    if dropped:
        notes.append(f"output folders written on Windows (another machine) are not read: {', '.join(dropped)}; "
                     "the folder set on this machine stays (the page's, or the default until you give one)")


def foreign_reader(flat: dict[str, Any]) -> Callable[[dict[str, Any], str, list[str], list[ConfigIssue]],
                                                      dict[str, Any]]:
    """What reads a foreign flat TOML: the first config adapter (registry.CONFIG_ADAPTERS) that claims it, else
    sd-scripts' reader (SD_SCRIPTS_ADAPTER)."""
    for name in CONFIG_ADAPTERS:
        adapter = importlib.import_module(name)
        if adapter.claims(flat):
            return adapter.read
    return sd_scripts_adapter().read


def _check_unset(name: str, method: str, issues: list[ConfigIssue]) -> None:
    if name not in BY_NAME:
        issues.append(_unknown(name, method))
    elif method not in BY_NAME[name].methods:
        issues.append(ConfigIssue(name, f"--unset {name}: it is not an option of {method} training"))


def load_config(method: str, path: Path | None = None, overrides: list[str] | None = None,
                warnings: list[str] | None = None) -> TrainConfig:
    """Load a config file and apply `--set` overrides (and `--unset` ones: Unset names among them).

    The file is one of ours (TOML with [group] sections, or a run's config.toml), an sd-scripts `--config_file`
    TOML (flat, or sections of any name, read with sd-scripts' meaning: see trainers/adapters/kohya/reading.py),
    or a kohya_ss GUI JSON (what kohya_ss would pass sd-scripts for it). Notes on what was translated go to `warnings`.
    """
    issues: list[ConfigIssue] = []
    notes: list[str] = [] if warnings is None else warnings
    flat, foreign = read_config_options(method, path, overrides or [], notes, issues)
    return config_from_dict(method, flat, issues, notes, foreign)
