"""Concept folders of a kohya dataset: create `<repeats>_<name>` and move images (with their caption files) between
them. A move is undone like a caption edit (backups.py)."""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from trainers.core.paths import name_problem
from trainers.dataset_edit.backups import Backup, save_backup
from trainers.dataset_edit.folders import Concept, Dataset, DatasetEditError, read_entry
from trainers.dataset_edit.lock import edit_lock


def create_concept(dataset: Dataset, name: str, repeats: int) -> Concept:
    """A new, empty `<repeats>_<name>` folder in a kohya dataset."""
    if dataset.layout != "kohya":
        raise DatasetEditError(f"{dataset.root} is not a kohya dataset (a folder of <repeats>_<name> folders): "
                               "concept folders are made in one; open the folder above your image folders")
    name = name.strip()
    if not name:
        raise DatasetEditError("concept name: give the class tokens, e.g. 'sks dog'")
    if not isinstance(repeats, int) or repeats < 1:
        raise DatasetEditError(f"repeats: got {repeats!r}; give a whole number of at least 1")
    folder = dataset.root / f"{repeats}_{name}"
    problem = name_problem(folder.name)
    if problem:
        raise DatasetEditError(f"concept name {problem}")
    if folder.exists():
        raise DatasetEditError(f"{folder} exists already; pick another name or number of repeats")
    folder.mkdir()
    concept = Concept(folder, repeats, name)
    dataset.concepts.append(concept)
    return concept


def move_images(dataset: Dataset, images: Iterable[Path | str], target: Concept, session: str = "") -> Backup | None:
    """Move images and their caption files into `target`'s folder, under the dataset's edit lock; refused as a
    whole if a name is taken there."""
    entries = [e for e in (dataset.entry(i) for i in images) if e.concept.folder != target.folder]
    if not entries:
        return None
    moves = []
    for entry in entries:
        for source in (entry.image, entry.caption_file):
            if source.exists():
                moves.append((source, target.folder / source.name))
    with edit_lock(dataset):
        taken = [str(to) for _, to in moves if to.exists()]
        if taken:
            raise DatasetEditError(f"{taken[0]} exists already in {target.folder.name}; rename one of the two first "
                                   "(nothing was moved)")
        backup = save_backup(dataset, f"move {len(entries)} image(s) to {target.folder.name}", moves=moves,
                             session=session)
        for source, to in moves:
            os.replace(source, to)
    for entry in entries:
        dataset.entries[dataset.entries.index(entry)] = read_entry(target.folder / entry.image.name, target,
                                                                   dataset.caption_extension)
    return backup
