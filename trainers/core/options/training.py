"""Every training option, declared once: the shared ones in trainers/core/options/groups/ (one module per group),
a method's own in its folder (trainers/methods/<name>/options.py: `OPTIONS`, and `GROUPS` for sections of its own),
a model family's own in its folder (trainers/models/<family>/options.py; see families.py, which also writes which
families read each option into its help).

Names follow kohya sd-scripts where one exists.
"""
from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from trainers.core.options.groups import (
    dataset,
    flow,
    full_weights,
    launch,
    logging,
    loss,
    model,
    network,
    optimizer,
    precision,
    sampling,
    saving,
)
from trainers.core.options import families
from trainers.core.options.schema import GROUPS as SHARED_GROUPS
from trainers.core.options.schema import Option
from trainers.core.registry import METHODS, MethodSpec

_SHARED: tuple[Option, ...] = (model.OPTIONS + dataset.OPTIONS + network.OPTIONS + full_weights.OPTIONS
                              + optimizer.OPTIONS + loss.OPTIONS + flow.OPTIONS + precision.OPTIONS + sampling.OPTIONS
                              + saving.OPTIONS + logging.OPTIONS + launch.OPTIONS)
METHOD_GROUPS_AFTER = "training"  # a method's own sections come after "What to train"
FAMILY_GROUPS_AFTER = "flow"  # a family's own sections come after the flow-matching one
FAMILY_DECLARATIONS = families.declarations()
# The shared options and the families' own, with the families that read each named in its help.
SHARED: tuple[Option, ...] = families.merged(_SHARED, FAMILY_DECLARATIONS)
# timestep_sampling values of one family or a few (their own draw), beside the shared ones every family draws by
FAMILY_TIMESTEP_SAMPLINGS: tuple[str, ...] = families.family_samplings(FAMILY_DECLARATIONS)


def _declarations(spec: MethodSpec) -> ModuleType | None:
    """A method's torch-free `options` module, or None where its folder has none."""
    return importlib.import_module(spec.options) if importlib.util.find_spec(spec.options) is not None else None


def _with_own_groups(shared: dict[str, str], own: dict[str, str], after: str) -> dict[str, str]:
    groups: dict[str, str] = {}
    for group, title in shared.items():
        groups[group] = title
        if group == after:
            groups.update((g, t) for g, t in own.items() if g not in shared)
    return groups


# Each method's `options` module, by method name: OPTIONS, GROUPS, OPEN_GROUPS (sections open on its tab) and
# SD_SCRIPTS (the sd-scripts script that trains it, by model family, for the kohya export), each where it has them.
DECLARATIONS: dict[str, ModuleType] = {spec.name: module for spec in METHODS
                                       if (module := _declarations(spec)) is not None}
OPTIONS: tuple[Option, ...] = SHARED + tuple(o for module in DECLARATIONS.values()
                                             for o in getattr(module, "OPTIONS", ()))
# (section id, title shown in the GUI and docs); also the TOML section names, in order.
GROUPS: dict[str, str] = _with_own_groups(
    _with_own_groups(SHARED_GROUPS, families.family_groups(FAMILY_DECLARATIONS), FAMILY_GROUPS_AFTER),
    {g: t for module in DECLARATIONS.values() for g, t in getattr(module, "GROUPS", {}).items()}, METHOD_GROUPS_AFTER)

BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
assert len(BY_NAME) == len(OPTIONS), "option names must be unique"
assert {o.group for o in OPTIONS} <= set(GROUPS), "every option's group is a shared group or one its method declares"


def open_groups(method: str) -> tuple[str, ...]:
    """The sections a method's tab shows open (its options.py's OPEN_GROUPS: what that tab is about)."""
    return tuple(getattr(DECLARATIONS.get(method), "OPEN_GROUPS", ()))


def family_declaration(name: str) -> families.FamilyOptions | None:
    """What a model family's options.py declares (None where its folder has none)."""
    return next((found for found in FAMILY_DECLARATIONS if any(spec.name == name for spec in found.specs)), None)


def family_sections() -> tuple[Option, ...]:
    """The options in the sections families declare for themselves (read by those families only)."""
    own = families.family_groups(FAMILY_DECLARATIONS)
    return tuple(o for o in OPTIONS if o.group in own)


def in_group(group: str) -> tuple[Option, ...]:
    """The options of one section, shared and the families' own (e.g. "flow": what flow matching reads)."""
    return tuple(o for o in OPTIONS if o.group == group)


def options_for(method: str) -> list[Option]:
    return [o.for_method(method) for o in OPTIONS if method in o.methods]
