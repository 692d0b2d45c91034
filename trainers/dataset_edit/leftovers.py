"""What a crash leaves in a dataset, cleaned when the GUI first opens it: our temp files beside the captions
(trainers/core/fsio.py's `.<name>.tmp-<pid>-<random>`, whose process is gone) and backup folders without a
manifest (an edit killed while it copied the captions it would change: it wrote nothing yet, so nothing to undo).
Done with the edit lock held, so an edit being written in another session or GUI is never taken for a crash."""
from __future__ import annotations

import shutil
import threading
from pathlib import Path

from trainers.core.fsio import clean_stale_temps
from trainers.dataset_edit.backups import MANIFEST
from trainers.dataset_edit.folders import Dataset, DatasetEditError
from trainers.dataset_edit.lock import edit_lock

_cleaned: set[Path] = set()  # the datasets this process has cleaned
_cleaned_lock = threading.Lock()


def clean_leftovers(dataset: Dataset) -> list[Path]:
    """Remove the dataset's leftovers (see the module); returns them. Nothing when another edit holds the lock or
    the dataset is read-only."""
    if not dataset.backups.is_dir() and not any(_has_temps(c.folder) for c in dataset.concepts):
        return []
    removed: list[Path] = []
    try:
        with edit_lock(dataset, wait_s=0):
            for folder in {dataset.root, *(c.folder for c in dataset.concepts)}:
                removed += clean_stale_temps(folder, "")
            for backup in sorted(dataset.backups.glob("*/")):
                if not (backup / MANIFEST).is_file():
                    shutil.rmtree(backup, ignore_errors=True)
                    removed.append(backup)
    except DatasetEditError:
        return removed
    return removed


def clean_once(dataset: Dataset) -> list[Path]:
    """clean_leftovers the first time this process opens the dataset (the next start after a crash)."""
    with _cleaned_lock:
        if dataset.root in _cleaned:
            return []
        _cleaned.add(dataset.root)
    return clean_leftovers(dataset)


def _has_temps(folder: Path) -> bool:
    try:
        return any(entry.name.startswith(".") and ".tmp" in entry.name for entry in folder.iterdir())
    except OSError:
        return False
