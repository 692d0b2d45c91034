"""Retention: which intermediate saves (model files and training states) stay on disk.

kohya's options: the newest N epoch saves, the step saves of the last N steps, the same for
states; plus every N-th save kept for good. Pure decisions (`to_remove`) apart from deleting (`prune`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.core.fsio import remove_save
from trainers.core.saves import Position, list_saves, read_manifest


@dataclass(frozen=True)
class SavedItem:
    """One intermediate save on disk: a model file/folder, or a training state."""

    path: Path
    kind: str  # "epoch" or "step"
    number: int  # the epoch or step it was saved at
    is_state: bool
    rolling: bool = False


@dataclass(frozen=True)
class Retention:
    """How many intermediate saves stay (kohya's options); None keeps everything."""

    last_n_epochs: int | None = None
    last_n_steps: int | None = None  # a window of steps, as in kohya: saves of the last N steps stay
    last_n_epochs_state: int | None = None
    last_n_steps_state: int | None = None
    keep_every_n_saves: int | None = None  # every N-th save of its kind stays for good
    every_n_epochs: int | None = None
    every_n_steps: int | None = None

    @classmethod
    def of(cls, values: dict[str, Any]) -> "Retention":
        epochs, steps = values.get("save_last_n_epochs"), values.get("save_last_n_steps")
        epochs_state, steps_state = values.get("save_last_n_epochs_state"), values.get("save_last_n_steps_state")
        return cls(epochs, steps, epochs if epochs_state is None else epochs_state,
                   steps if steps_state is None else steps_state, values.get("keep_every_n_saves"),
                   values.get("save_every_n_epochs"), values.get("save_every_n_steps"))


def intermediate_saves(output_dir: Path, output_name: str) -> list[SavedItem]:
    """The epoch and step saves of `output_name` (model files, folders, EMA copies) and their training states."""
    items = []
    for path, name in list_saves(output_dir, output_name):
        if name.kind == "final" or name.state and name.ema:
            continue
        rolling = False
        if name.state:
            try:
                rolling = read_manifest(path).get("kind") == "rolling"
            except ValueError:
                continue  # not a complete state: not ours to delete
        items.append(SavedItem(path, name.kind, name.number, name.state, rolling))
    return sorted(items, key=lambda i: (i.kind, i.number, i.path.name))


def to_remove(items: list[SavedItem], policy: Retention, at: Position) -> list[SavedItem]:
    """The saves `policy` drops now that the run is at `at`. Pure: decides, deletes nothing.

    Never dropped: saves made after `at` (another timeline, e.g. before a resume from an older state),
    every N-th save (keep_every_n_saves), and the newest training state.
    """
    current = [i for i in items if i.number <= (at.epoch if i.kind == "epoch" else at.step)]
    states = [i for i in current if i.is_state]
    newest_state = _newest_state(states)
    doomed = []
    for is_state in (False, True):
        for kind in ("epoch", "step"):
            group = sorted({i.number for i in current if i.is_state == is_state and i.kind == kind and not i.rolling})
            keep = _kept_numbers(group, kind, is_state, policy, at)
            doomed += [i for i in current if i.is_state == is_state and i.kind == kind and not i.rolling
                       and i.number not in keep]
    rolling = [i for i in states if i.rolling]
    doomed += [i for i in rolling if i != newest_state]  # a rolling state lives until the next state
    return [i for i in doomed if i != newest_state]


def _newest_state(states: list[SavedItem]) -> SavedItem | None:
    """The state a resume from 'latest' would pick: the one written last."""
    def written(item: SavedItem) -> tuple[float, int]:
        try:
            manifest = read_manifest(item.path)
        except ValueError:
            return -1.0, -1
        return float(manifest.get("time", 0)), int(manifest.get("step", 0))

    return max(states, key=written, default=None)


def _kept_numbers(numbers: list[int], kind: str, is_state: bool, policy: Retention, at: Position) -> set[int]:
    if kind == "epoch":
        last = policy.last_n_epochs_state if is_state else policy.last_n_epochs
        keep = set(numbers if last is None else numbers[-last:])
        every = policy.every_n_epochs
    else:
        window = policy.last_n_steps_state if is_state else policy.last_n_steps
        keep = set(numbers if window is None else [n for n in numbers if n >= at.step - window])
        every = policy.every_n_steps
    if policy.keep_every_n_saves and every:
        keep |= {n for n in numbers if n % (every * policy.keep_every_n_saves) == 0}
    return keep


def prune(output_dir: Path, output_name: str, policy: Retention, at: Position) -> list[Path]:
    """Delete what the retention policy drops; returns the paths removed."""
    removed = []
    for item in to_remove(intermediate_saves(output_dir, output_name), policy, at):
        remove_save(item.path)
        removed.append(item.path)
    return removed
