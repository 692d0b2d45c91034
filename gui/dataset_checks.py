"""The Dataset tab's checks before training (trainers.dataset_edit.checks), in words: each check with its count and
the files it found, and which one-click fix (trainers.dataset_edit.fixes) applies."""
from __future__ import annotations

from collections.abc import Iterable

from gui.text import plain
from trainers.dataset_edit.checks import FAR_BELOW, DatasetChecks
from trainers.dataset_edit.folders import Entry

MAX_NAMES = 50  # files named per check


def shown_name(entry: Entry) -> str:
    """An image as `<concept folder>/<file>`, so two concepts' files of one name are told apart."""
    return plain(f"{entry.concept.folder.name}/{entry.image.name}")


def _names(entries: Iterable[Entry]) -> str:
    entries = list(entries)
    more = f" and {len(entries) - MAX_NAMES} more" if len(entries) > MAX_NAMES else ""
    return ", ".join(shown_name(e) for e in entries[:MAX_NAMES]) + more


def _groups(groups: list[list[Entry]]) -> str:
    return "".join(f"\n  - {_names(group)}" for group in groups[:MAX_NAMES])


def checks_text(checks: DatasetChecks) -> str:
    """The checks as markdown: each problem found with its files (a clean dataset says so)."""
    lines = []
    if checks.exact:
        lines.append(f"- **{len(checks.exact)} group(s) of exact duplicates** (the same bytes; *Move duplicates "
                     f"aside* keeps the first of each):" + _groups(checks.exact))
    if checks.near:
        lines.append(f"- **{len(checks.near)} group(s) of near duplicates** (the same picture resized, re-encoded "
                     "or retouched, by a perceptual hash; *Move duplicates aside* keeps the largest of each; look "
                     "before you move them):" + _groups(checks.near))
    if checks.far_below:
        lines.append(f"- **{len(checks.far_below)} image(s) far below the training resolution** (enlarged more "
                     f"than {FAR_BELOW:g}x to their bucket: they train blurred; replace them or leave them out): " +
                     ", ".join(f"{shown_name(e)} ({e.size[0]}x{e.size[1]} -> {w}x{h})"
                               for e, (w, h) in checks.far_below[:MAX_NAMES]))
    if checks.empty:
        lines.append(f"- **{len(checks.empty)} empty caption(s)** (a blank caption file trains with the folder's "
                     f"class tokens, or with nothing): {_names(checks.empty)}")
    for shared in checks.shared:
        lines.append(f"- **{len(shared.entries)} of {shared.of} captions in {plain(shared.concept.folder.name)} are "
                     f"the same text** ({plain(shared.caption)!r}; the model cannot tell the images apart by their "
                     "captions): " + _names(shared.entries))
    if checks.over_limit:
        lines.append(f"- **{len(checks.over_limit)} caption(s) longer than the text encoder reads** (the rest is "
                     "cut off; see Caption length below): " + _names(e for e, _ in checks.over_limit))
    if checks.encoding:
        lines.append(f"- **{len(checks.encoding)} caption file(s) not plain UTF-8** (sd-scripts reads only UTF-8; "
                     "*Re-save captions as UTF-8* rewrites those read as text, the same text): " +
                     _names(checks.encoding))
    if not lines:
        return "**Checks before training**: nothing found (no duplicates, tiny images or bad captions)."
    return "**Checks before training** (every fix is backed up; Undo puts the files back)\n\n" + "\n".join(lines)
