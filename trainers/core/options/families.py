"""What the model families bring to the options: each family's torch-free, optional `options` module
(trainers/models/<family>/options.py, named by the registry; families of one package share it) may declare

- OPTIONS: options of its own (read by its families alone), in a shared group or one of its own;
- GROUPS: sections of its own ({id: title}; after the flow section);
- READS: the shared options it reads;
- TIMESTEP_SAMPLINGS: timestep_sampling values of its own ({value: what it draws});
- NOTES: what a shared option means for it ({option: sentence});
- NETWORK_ARGS: network_args keys its LoRAs take that no shared option names (FLUX.1's layer choices); the other
  families refuse them.

From these, every option a family reads says so in its help ("FLUX.1 and Chroma: ..."), timestep_sampling's
choices and help gain the families' own values, and each note is added under the names of the families that give
it. The shared options' own help (trainers/core/options/groups/) names no family.
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, replace
from types import ModuleType

from trainers.core.options.schema import Option
from trainers.core.registry import FAMILIES, FamilySpec

SAMPLING_OPTION = "timestep_sampling"  # the option whose choices the families extend


@dataclass(frozen=True)
class FamilyOptions:
    """One family package's declarations, with the families (registry entries) that share them."""

    specs: tuple[FamilySpec, ...]
    module: ModuleType

    @property
    def titles(self) -> tuple[str, ...]:
        return tuple(spec.title for spec in self.specs)

    @property
    def options(self) -> tuple[Option, ...]:
        return tuple(getattr(self.module, "OPTIONS", ()))

    @property
    def reads(self) -> frozenset[str]:
        """The options it reads: the shared ones it names and its own."""
        return frozenset(getattr(self.module, "READS", ())) | {o.name for o in self.options}

    @property
    def samplings(self) -> dict[str, str]:
        return dict(getattr(self.module, "TIMESTEP_SAMPLINGS", {}))

    @property
    def notes(self) -> dict[str, str]:
        return dict(getattr(self.module, "NOTES", {}))

    @property
    def groups(self) -> dict[str, str]:
        return dict(getattr(self.module, "GROUPS", {}))

    @property
    def network_args(self) -> tuple[str, ...]:
        return tuple(getattr(self.module, "NETWORK_ARGS", ()))


def declarations() -> tuple[FamilyOptions, ...]:
    """Every family package's `options` module, in registry order (the order help texts name families in)."""
    by_package: dict[str, list[FamilySpec]] = {}
    for spec in FAMILIES:
        by_package.setdefault(spec.options, []).append(spec)
    return tuple(FamilyOptions(tuple(specs), importlib.import_module(name)) for name, specs in by_package.items()
                 if importlib.util.find_spec(name) is not None)


def family_network_args() -> dict[str, tuple[str, ...]]:
    """{network_args key: the titles of the families whose LoRAs take it} (their NETWORK_ARGS)."""
    found: dict[str, tuple[str, ...]] = {}
    for family in declarations():
        for key in family.network_args:
            found[key] = found.get(key, ()) + family.titles
    return found


def names(titles: list[str]) -> str:
    """'A', 'A and B', 'A, B and C'."""
    return titles[0] if len(titles) == 1 else ", ".join(titles[:-1]) + " and " + titles[-1]


def _readers(name: str, found: tuple[FamilyOptions, ...]) -> list[str]:
    return [title for family in found if name in family.reads for title in family.titles]


def family_samplings(found: tuple[FamilyOptions, ...]) -> tuple[str, ...]:
    """The timestep_sampling values the families add, in registry order."""
    return tuple(dict.fromkeys(value for family in found for value in family.samplings))


def _sampling_help(found: tuple[FamilyOptions, ...]) -> str:
    parts = []
    for value in family_samplings(found):
        titles = [title for family in found if value in family.samplings for title in family.titles]
        what = next(family.samplings[value] for family in found if value in family.samplings)
        parts.append(f" {names(titles)} only: {value!r}, {what}")
    return "".join(parts)


def _notes_help(name: str, found: tuple[FamilyOptions, ...]) -> str:
    by_text: dict[str, list[str]] = {}
    for family in found:
        if name in family.notes:
            by_text.setdefault(family.notes[name], []).extend(family.titles)
    return "".join(f" {names(titles)}: {text}" for text, titles in by_text.items())


def _lowered(text: str) -> str:
    """A sentence continued after a colon: 'How ...' as 'how ...', but 'LoRA ...' kept."""
    return text[0].lower() + text[1:] if len(text) > 1 and text[0].isupper() and text[1].islower() else text


def merged(shared: tuple[Option, ...], found: tuple[FamilyOptions, ...]) -> tuple[Option, ...]:
    """The shared options and the families' own, each family-read one's help naming its readers (with " only" for
    a family's own) and the families' notes; timestep_sampling with the families' values."""
    own = tuple(o for family in found for o in family.options)
    own_names = {o.name for o in own}
    out = []
    for opt in shared + own:
        help_text = opt.help
        readers = _readers(opt.name, found)
        if readers:
            only = " only" if opt.name in own_names else ""
            help_text = f"{names(readers)}{only}: {_lowered(help_text)}"
        help_text += _notes_help(opt.name, found)
        choices = opt.choices
        if opt.name == SAMPLING_OPTION and opt.choices is not None:
            choices = opt.choices + tuple(v for v in family_samplings(found) if v not in opt.choices)
            help_text += _sampling_help(found)
        out.append(replace(opt, help=help_text, choices=choices))
    return tuple(out)


def family_groups(found: tuple[FamilyOptions, ...]) -> dict[str, str]:
    return {group: title for family in found for group, title in family.groups.items()}
