"""Caption edits, previewed before they write and undoable: one caption typed in place, or a bulk operation
(tags.BulkOp) over the whole dataset or chosen images. Captions are written as UTF-8 (what sd-scripts reads)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from trainers.core.fsio import atomic_write_text
from trainers.dataset_edit.backups import Backup, save_backup
from trainers.dataset_edit.folders import Dataset, DatasetEditError, Entry
from trainers.dataset_edit.tags import BulkOp


@dataclass(frozen=True)
class Change:
    entry: Entry
    after: str

    @property
    def before(self) -> str:
        return self.entry.caption

    @property
    def reencode_only(self) -> bool:
        """The text stays; the file is rewritten as UTF-8."""
        return self.after == self.before


def preview(dataset: Dataset, op: BulkOp, images: Iterable[Path | str] | None = None) -> list[Change]:
    """What `op` would change, caption by caption, over `images` (None: every readable image); writes nothing."""
    problem = op.problem()
    if problem:
        raise DatasetEditError(problem)
    entries = dataset.readable if images is None else [dataset.entry(i) for i in images]
    changes = []
    for entry in entries:
        after = op.apply(entry.caption)
        reencode = op.kind == "fix_encoding" and entry.has_caption and bool(entry.encoding)
        if after != entry.caption or reencode:
            changes.append(Change(entry, after))
    return changes


def caption_edit(dataset: Dataset, image: Path | str, text: str) -> list[Change]:
    """The change of typing `text` as the caption of `image` (none when it is the same text in UTF-8)."""
    entry = dataset.entry(image)
    same = text == entry.caption and entry.has_caption and not entry.encoding
    return [] if same else [Change(entry, text)]


def write_changes(dataset: Dataset, changes: list[Change], what: str) -> Backup | None:
    """Back up the caption files `changes` touch, then write each as UTF-8; None when there is nothing to write."""
    if not changes:
        return None
    backup = save_backup(dataset, what, [c.entry.caption_file for c in changes])
    for change in changes:
        try:
            atomic_write_text(change.entry.caption_file, change.after)
        except OSError as err:
            raise DatasetEditError(f"could not write {change.entry.caption_file} ({err.strerror or err}); undo puts "
                                   "back the captions written before it") from None
        change.entry.caption, change.entry.has_caption, change.entry.encoding = change.after, True, ""
    return backup


def describe(op: BulkOp, count: int) -> str:
    """An edit in words, as the backup list shows it."""
    args = " -> ".join(repr(a) for a in (op.text, op.replacement) if a)
    return f"{op.kind} {args} on {count} caption(s)".replace("  ", " ")
