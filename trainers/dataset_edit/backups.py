"""Undo for dataset edits: before an edit writes, the caption files it will change are copied into a new folder
`<dataset>/.atelier_backup/<timestamp>/` with a manifest.json saying what the edit was, where each copy came from
(and which files it creates, or which images it moves), which browser session made it and a fingerprint of each
caption it writes. Undo puts back the session's own newest edit and removes its backup; it is refused, nothing
changed, when a caption it would put back was changed since (by a newer edit, a caption job or an editor), so a
newer edit's result is never lost.

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
from trainers.dataset_edit.folders import Dataset, DatasetEditError, file_fingerprint
from trainers.dataset_edit.lock import edit_lock, unwritable

MANIFEST = "manifest.json"


@dataclass
class Backup:
    folder: Path
    what: str  # the edit, in words ("trigger 'sks' on 12 captions")
    created: float = 0.0
    files: list[tuple[str, str | None]] = field(default_factory=list)  # (file, its copy's name; None: it was new)
    moves: list[tuple[str, str]] = field(default_factory=list)  # (from, to) of files the edit moved
    session: str = ""  # the browser session that made it ("": not recorded, anyone's to undo)
    written: list[str | None] = field(default_factory=list)  # the fingerprint of what it wrote to each of `files`

    @property
    def name(self) -> str:
        return self.folder.name


def _stored(root: Path, path: Path) -> str:
    """A path as the manifest keeps it: relative to the dataset (which may move), else absolute."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def _loaded(root: Path, text: str) -> Path:
    return root / text  # an absolute `text` stays itself


def save_backup(dataset: Dataset, what: str, files: Sequence[Path] = (), moves: Sequence[tuple[Path, Path]] = (),
                session: str = "", written: Sequence[str | None] = ()) -> Backup:
    """Copy `files` (those that exist) and record `moves` in a new backup folder, before the edit writes (with the
    dataset's edit lock held); `written`: the fingerprint of what the edit will write to each file."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    folder = dataset.backups / stamp
    try:
        folder.mkdir(parents=True)
    except OSError as err:
        raise unwritable(dataset, err) from None
    backup = Backup(folder, what, time.time(), session=session, written=list(written))
    for number, path in enumerate(files):
        copy = f"{number:06d}{path.suffix}" if path.exists() else None
        if copy:
            shutil.copy2(path, folder / copy)
        backup.files.append((_stored(dataset.root, path), copy))
    backup.moves = [(_stored(dataset.root, a), _stored(dataset.root, b)) for a, b in moves]
    atomic_write_text(folder / MANIFEST, json.dumps({"what": what, "created": backup.created, "files": backup.files,
                                                     "moves": backup.moves, "session": session,
                                                     "written": backup.written}, indent=1))
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
                            [(str(a), str(b)) for a, b in data.get("moves", [])],
                            str(data.get("session") or ""), list(data.get("written") or [])))
    return found


def at(backup: Backup) -> str:
    return datetime.fromtimestamp(backup.created).strftime("%H:%M:%S")


def own_newest(backups: list[Backup], session: str | None) -> Backup:
    """The newest of `backups` that `session` made (None: the newest of all; an edit that recorded no session is
    anyone's); refused, saying whose the newest is, when there is none."""
    mine = next((b for b in backups if session is None or b.session in ("", session)), None)
    if mine is None:
        raise DatasetEditError(f"nothing of yours to undo: the newest edit ({backups[0].what}, at {at(backups[0])}) "
                               "was made in another browser session (or before this page was reloaded); Undo "
                               "undoes only edits made in this one")
    return mine


def changed_since(dataset: Dataset, backup: Backup, backups: list[Backup]) -> str:
    """Why undoing `backup` would lose a newer caption ("" when it would not): a file it wrote holds something
    else now."""
    for (original, _), written in zip(backup.files, backup.written):
        if written is None or file_fingerprint(_loaded(dataset.root, original)) == written:
            continue
        newer = next((b for b in backups if b.created > backup.created and original in (f for f, _ in b.files)),
                     None)
        by = f"by the edit {newer.what} at {at(newer)}" if newer else "by a caption job, an editor or a sync"
        return f"{original} was changed since ({by})"
    return ""


def undo_last(dataset: Dataset, session: str | None = None) -> Backup:
    """Put back what `session`'s newest backup holds (captions restored, new files removed, moves reversed); remove
    it. Refused, nothing changed, when a caption it would put back was changed since it was written."""
    with edit_lock(dataset):
        backups = list_backups(dataset)
        if not backups:
            raise DatasetEditError(f"nothing to undo: {dataset.backups} holds no backup")
        backup = own_newest(backups, session)
        changed = changed_since(dataset, backup, backups)
        if changed:
            raise DatasetEditError(f"cannot undo {backup.what}: {changed}; undoing it would lose that newer "
                                   "caption, so nothing was undone (edit the caption by hand instead)")
        _put_back(dataset, backup)
    return backup


def _put_back(dataset: Dataset, backup: Backup) -> None:
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
