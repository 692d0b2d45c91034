"""Undo for dataset edits: before an edit writes, the caption files it will change are copied into a new folder
`<dataset>/.atelier_backup/<timestamp>/` with a manifest.json saying what the edit was, where each copy came from
(and which files it creates, or which images it moves). Undo puts back the newest one and removes it.

Every copy and the manifest are written before the first caption is, so an edit stopped half-way is undone whole.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from trainers.core.fsio import atomic_path, atomic_write_text
from trainers.dataset_edit.folders import Dataset, DatasetEditError

MANIFEST = "manifest.json"


@dataclass
class Backup:
    folder: Path
    what: str  # the edit, in words ("trigger 'sks' on 12 captions")
    created: float = 0.0
    files: list[tuple[str, str | None]] = field(default_factory=list)  # (file, its copy's name; None: it was new)
    moves: list[tuple[str, str]] = field(default_factory=list)  # (from, to) of files the edit moved

    @property
    def name(self) -> str:
        return self.folder.name


def _stored(root: Path, path: Path) -> str:
    """A path as the manifest keeps it: relative to the dataset (which may move), else absolute."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def _loaded(root: Path, text: str) -> Path:
    return root / text  # an absolute `text` stays itself


def save_backup(dataset: Dataset, what: str, files: Sequence[Path] = (),
                moves: Sequence[tuple[Path, Path]] = ()) -> Backup:
    """Copy `files` (those that exist) and record `moves` in a new backup folder, before the edit writes."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    folder = dataset.backups / stamp
    try:
        folder.mkdir(parents=True)
    except OSError as err:
        raise DatasetEditError(f"cannot keep a backup in {dataset.backups} ({err.strerror or err}); nothing was "
                               "changed: make the dataset folder writable") from None
    backup = Backup(folder, what, time.time())
    for number, path in enumerate(files):
        copy = f"{number:06d}{path.suffix}" if path.exists() else None
        if copy:
            shutil.copy2(path, folder / copy)
        backup.files.append((_stored(dataset.root, path), copy))
    backup.moves = [(_stored(dataset.root, a), _stored(dataset.root, b)) for a, b in moves]
    atomic_write_text(folder / MANIFEST, json.dumps({"what": what, "created": backup.created, "files": backup.files,
                                                     "moves": backup.moves}, indent=1))
    return backup


def list_backups(dataset: Dataset) -> list[Backup]:
    """The dataset's backups, newest first (a folder without a readable manifest is left out)."""
    found = []
    for folder in sorted(dataset.backups.glob("*/"), reverse=True):
        try:
            data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        found.append(Backup(folder, str(data.get("what", "")), float(data.get("created", 0.0)),
                            [(str(a), b) for a, b in data.get("files", [])],
                            [(str(a), str(b)) for a, b in data.get("moves", [])]))
    return found


def undo_last(dataset: Dataset) -> Backup:
    """Put back what the newest backup holds (captions restored, new files removed, moves reversed); remove it."""
    backups = list_backups(dataset)
    if not backups:
        raise DatasetEditError(f"nothing to undo: {dataset.backups} holds no backup")
    backup = backups[0]
    root = dataset.root
    moves = [(_loaded(root, moved_to), _loaded(root, moved_from)) for moved_from, moved_to in reversed(backup.moves)]
    taken = next((target for _, target in moves if target.exists()), None)
    if taken is not None:  # checked before anything moves: undo happens whole or not at all
        raise DatasetEditError(f"cannot move {taken.name} back: {taken} exists again; move or rename it, then undo "
                               "again")
    for source, target in moves:
        if source.exists():
            os.replace(source, target)
    for original, copy in backup.files:
        target = _loaded(root, original)
        if copy is None:
            target.unlink(missing_ok=True)
            continue
        with atomic_path(target) as tmp:
            shutil.copyfile(backup.folder / copy, tmp)
    shutil.rmtree(backup.folder)
    return backup
