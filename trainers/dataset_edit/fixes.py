"""The one-click fixes of the dataset checks (checks.py), undone like any edit (backups.py): duplicates moved aside
(with their caption files, into a hidden folder no trainer reads; nothing is deleted), and caption files that are
not plain UTF-8 re-saved as UTF-8 (the same text)."""
from __future__ import annotations

import os
from pathlib import Path

from trainers.dataset_edit.backups import Backup, save_backup
from trainers.dataset_edit.checks import duplicates_to_move
from trainers.dataset_edit.edits import preview, write_changes
from trainers.dataset_edit.folders import Dataset, DatasetEditError
from trainers.dataset_edit.lock import edit_lock
from trainers.dataset_edit.tags import BulkOp

SET_ASIDE_DIR = ".atelier_set_aside"  # hidden: neither a concept folder nor scanned as images


def set_aside_path(dataset: Dataset, image: Path) -> Path:
    """Where a duplicate goes: `<dataset>/.atelier_set_aside/<its path in the dataset>`; an image outside the
    dataset's folder (a dataset .toml's image_dir elsewhere) into `.atelier_set_aside/` beside it."""
    if image.is_relative_to(dataset.root):
        return dataset.root / SET_ASIDE_DIR / image.relative_to(dataset.root)
    return image.parent / SET_ASIDE_DIR / image.name


def set_aside_duplicates(dataset: Dataset, near: bool = True, session: str = "") -> Backup | None:
    """Move every duplicate image but the one kept of its group (checks.duplicates_to_move), with its caption file,
    under SET_ASIDE_DIR, under the dataset's edit lock; refused whole when a name is taken there. None: no
    duplicates."""
    pairs = duplicates_to_move(dataset, near)
    if not pairs:
        return None
    moves = [(source, set_aside_path(dataset, source)) for entry, _ in pairs
             for source in (entry.image, entry.caption_file) if source.exists()]
    with edit_lock(dataset):
        taken = next((to for _, to in moves if to.exists()), None)
        if taken is not None:
            raise DatasetEditError(f"{taken} exists already (set aside before); move it elsewhere or undo that "
                                   "edit first (nothing was moved)")
        kind = "exact and near" if near else "exact"
        backup = save_backup(dataset, f"set aside {len(pairs)} {kind} duplicate image(s)", moves=moves,
                             session=session)
        for source, to in moves:
            try:
                to.parent.mkdir(parents=True, exist_ok=True)
                os.replace(source, to)
            except OSError as err:
                raise DatasetEditError(f"could not move {source} to {to} ({err.strerror or err}); Undo moves back "
                                       "what was moved before it") from None
    moved = {id(entry) for entry, _ in pairs}
    dataset.entries = [e for e in dataset.entries if id(e) not in moved]
    return backup


def resave_utf8(dataset: Dataset, session: str = "") -> Backup | None:
    """Rewrite each caption file that is not plain UTF-8 but reads as text (a byte-order mark, UTF-16/32,
    Windows-1252) as UTF-8, the same text, backed up first: the bulk edit fix_encoding over the whole dataset.
    None: there is none."""
    changes = preview(dataset, BulkOp("fix_encoding"))
    return write_changes(dataset, changes, f"re-save {len(changes)} caption file(s) as UTF-8", session)
