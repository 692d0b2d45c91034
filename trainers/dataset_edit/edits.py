"""Caption edits, previewed before they write and undoable: one caption typed in place, or a bulk operation
(tags.BulkOp) over the whole dataset or chosen images. Captions are written as UTF-8 (what sd-scripts reads).

An edit writes with the dataset's edit lock held, and only over captions that still hold what the edit was made
from: one written meanwhile (by another session's edit, a caption job, an editor) refuses the whole edit, named,
rather than being overwritten unseen."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from trainers.core.fsio import atomic_write_text
from trainers.data.text_files import decode_caption
from trainers.dataset_edit.backups import Backup, save_backup
from trainers.dataset_edit.folders import Dataset, DatasetEditError, Entry, file_fingerprint, fingerprint
from trainers.dataset_edit.lock import edit_lock
from trainers.dataset_edit.tags import BulkOp


@dataclass(frozen=True)
class Change:
    entry: Entry
    after: str
    made_from: str | None = None  # the fingerprint of the caption file the edit was made from (None: entry.seen)

    @property
    def before(self) -> str:
        return self.entry.caption

    @property
    def reencode_only(self) -> bool:
        """The text stays; the file is rewritten as UTF-8."""
        return self.after == self.before

    @property
    def stale(self) -> bool:
        """The caption file holds something else than what this change was made from."""
        expected = self.entry.seen if self.made_from is None else self.made_from
        return file_fingerprint(self.entry.caption_file) != expected


def preview(dataset: Dataset, op: BulkOp, images: Iterable[Path | str] | None = None) -> list[Change]:
    """What `op` would change, caption by caption, over `images` (None: every readable image); writes nothing."""
    problem = op.problem()
    if problem:
        raise DatasetEditError(problem)
    entries = dataset.readable if images is None else [dataset.entry(i) for i in images]
    changes = []
    for entry in entries:
        after = op.apply(entry.caption)
        reencode = op.kind == "fix_encoding" and entry.has_caption and bool(entry.encoding) and entry.is_text
        if after != entry.caption or reencode:
            changes.append(Change(entry, after))
    return changes


def caption_edit(dataset: Dataset, image: Path | str, text: str, loaded: str | None = None) -> list[Change]:
    """The change of typing `text` as the caption of `image` (none when it is the same text in UTF-8); `loaded`: the
    fingerprint of the caption file when the text was loaded to be edited (None: as the dataset read it)."""
    entry = dataset.entry(image)
    same = text == entry.caption and entry.has_caption and not entry.encoding
    return [] if same else [Change(entry, text, loaded)]


def refuse_stale(changes: list[Change]) -> None:
    """DatasetEditError naming the captions written since `changes` were made from them (nothing is written)."""
    stale = [c for c in changes if c.stale]
    if not stale:
        return
    first = stale[0].entry.caption_file
    more = f" and {len(stale) - 1} more" if len(stale) > 1 else ""
    now = f"it now reads {_shown(first)!r}" if first.exists() else "it is gone"
    raise DatasetEditError(f"{first.name}{more} changed since this edit read it ({now}; written by another browser "
                           "session, a caption job or an editor); nothing was written: pick the image or open the "
                           "dataset again to load the newer caption, then redo the edit (copy your text first)")


def _shown(path: Path) -> str:
    try:
        text = decode_caption(path.read_bytes()).text or ""
    except OSError:
        return "(unreadable)"
    return text if len(text) <= 80 else text[:80] + "…"


def write_changes(dataset: Dataset, changes: list[Change], what: str, session: str = "") -> Backup | None:
    """Back up the caption files `changes` touch, then write each as UTF-8, under the dataset's edit lock; refused
    as a whole when one was written since the change was made from it. None when there is nothing to write."""
    if not changes:
        return None
    with edit_lock(dataset):
        refuse_stale(changes)
        written = [fingerprint(c.after.encode("utf-8")) for c in changes]
        backup = save_backup(dataset, what, [c.entry.caption_file for c in changes], session=session,
                             written=written)
        _write(changes)
    return backup


def _write(changes: list[Change]) -> None:
    for change in changes:
        try:
            atomic_write_text(change.entry.caption_file, change.after)
        except OSError as err:
            raise DatasetEditError(f"could not write {change.entry.caption_file} ({err.strerror or err}); undo puts "
                                   "back the captions written before it") from None
        change.entry.caption, change.entry.has_caption, change.entry.encoding = change.after, True, ""
        change.entry.seen = fingerprint(change.after.encode("utf-8"))


def describe(op: BulkOp, count: int) -> str:
    """An edit in words, as the backup list shows it."""
    args = " -> ".join(repr(a) for a in (op.text, op.replacement) if a)
    return f"{op.kind} {args} on {count} caption(s)".replace("  ", " ")
