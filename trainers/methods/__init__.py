"""Training methods as plug-ins (listed in trainers/core/registry.py), one package each:

- `options.py` (torch-free, optional): the method's own options (`OPTIONS`, each naming the method(s) that use
  it), sections of its own (`GROUPS`, {id: title}) and the sd-scripts script that trains it (`SD_SCRIPTS`,
  {model family: script}). They join the schema, so the GUI's tab, Validate, TOML, presets and docs/options.md
  have them with no edit elsewhere. This module imports nothing of trainers.core.options but its schema: the
  schema is built from it.
- `rules.py` (torch-free, used by Validate in the GUI): the method's own checks (its dataset inputs among them),
  the files its final save writes, and what would make it fit in less memory;
- `trainer.py`: `METHOD`, what it plugs into the shared training loop (trainers/train/method.py): what it trains,
  how that is saved, the step hooks it needs, the weights samples are made with.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from trainers.core.errors import ConfigIssue
from trainers.core.registry import method_spec

if TYPE_CHECKING:  # trainers.core.options imports the methods' options modules, below this package
    from trainers.core.options import TrainConfig


class MethodRules(Protocol):
    def issues(self, cfg: TrainConfig) -> list[ConfigIssue]:
        """Problems of `cfg` that concern this method's own options."""

    def outputs(self, cfg: TrainConfig) -> list[Path]:
        """Every path the final save writes."""

    def output_suffix(self, cfg: TrainConfig) -> str:
        """What follows a save's name: '.safetensors' for a file, '' for a folder."""

    def memory_tips(self, cfg: TrainConfig) -> list[str]:
        """What this method could change to use less memory, most effective first; only what is not done yet."""


def rules_for(method: str) -> MethodRules:
    module: ModuleType = importlib.import_module(method_spec(method).rules)
    return module  # type: ignore[return-value]


def method_memory_tips(cfg: TrainConfig) -> list[str]:
    """`cfg`'s method's own advice when memory runs out (its rules' `memory_tips`): what a run is handed
    (trainers/train/faults.py sits below the methods)."""
    return rules_for(cfg.method).memory_tips(cfg)
