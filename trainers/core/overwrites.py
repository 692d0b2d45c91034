"""Saves that would replace files a run did not write: refused by Validate before a run starts and by the run
before each save. What a save writes is the method's (its rules' `outputs`), so both hand it in: the run's
saving code sits below the methods and does not look them up."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trainers.core.errors import ConfigIssue
from trainers.core.options.loading import TrainConfig
from trainers.core.options.validation import states_supported
from trainers.core.saves import SaveName, state_name, written_before

Outputs = Callable[[TrainConfig], list[Path]]  # every path a method's final save of `cfg` writes (MethodRules.outputs)


def save_paths(cfg: TrainConfig, outputs: Outputs, name: str, with_state: bool) -> list[Path]:
    """Every path the save `name` (e.g. 'lora-step00000500') writes: the method's files and folders (`outputs`),
    and its training state when it has one."""
    paths = outputs(cfg.replace(output_name=name))
    if with_state and states_supported(cfg.values):
        paths.append(Path(cfg.output_dir).expanduser() / state_name(name))
    return paths


def overwrite_issue(cfg: TrainConfig, outputs: Outputs, names: list[SaveName], since: float | None,
                    with_state: bool | None = None) -> ConfigIssue | None:
    """The first path of the saves `names` (with their training states: `with_state`, save_state when None) that
    exists and was written before `since` (see `written_before`), unless overwrite_output is set: the run did not
    write it, so it must not replace it."""
    if cfg.overwrite_output or not cfg.output_dir.strip() or not cfg.output_name.strip():
        return None
    states = bool(cfg.save_state) if with_state is None else with_state
    for name in names:
        for path in save_paths(cfg, outputs, name.filename, states):
            try:
                found = written_before(path, since)
            except OSError:  # a name too long for the file system: named by the checks of output_name
                return None
            if found:
                return ConfigIssue("output_name", f"{path} already exists, and this run did not write it: its "
                                   f"{name.label} save would replace it. Choose another output_name or output_dir, "
                                   "move the file away, or set overwrite_output = true", "saving")
    return None
