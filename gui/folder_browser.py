"""A folder browser on the server for the page's path fields: a Browse button in each opens a list of the
folders and model files under the allowed roots; picking a folder opens it, picking a file (or "use this folder")
fills the field. Model files are listed with their kind (trainers.models.file_kind: headers only).

Only what lies under a root is listed, symlinks resolved: `..`, a link out of a root, or a value the browser did not
list is refused with a message. Torch-free.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from trainers.models.file_kind import MODEL_SUFFIXES, model_kind

CONFIG_SUFFIXES = (".toml", ".json", ".txt")  # dataset configs, metadata JSON, sample prompts
MAX_LISTED = 500  # entries of one folder; the rest are counted
OPEN, USE = "open:", "use:"  # what picking an entry does: list that folder, or put the path into the field
ROOTS: list[Path] = []  # app.py sets them (browse_roots); empty: the home folder and the current folder


class BrowseError(ValueError):
    """A path the browser may not list; the message says which folders it may."""


def browse_roots(allowed: list[Path] | None, runs_dir: Path, datasets_dir: Path, models_dir: Path) -> list[Path]:
    """The folders the browser lists: the allowed roots (--allowed-root, or those of an exposed GUI); on this machine
    alone, the datasets, runs and models folders and the home folder. Symlinks resolved, missing ones left out."""
    candidates = allowed if allowed is not None else [datasets_dir, runs_dir, models_dir, Path.home()]
    roots: list[Path] = []
    for root in candidates:
        resolved = Path(root).expanduser().resolve()
        if resolved.is_dir() and resolved not in roots:
            roots.append(resolved)
    return roots


def current_roots() -> list[Path]:
    return ROOTS or browse_roots(None, Path.cwd() / "runs", Path.cwd() / "datasets", Path.cwd() / "models")


def inside(path: Path, roots: list[Path]) -> Path | None:
    """`path` with symlinks and `..` resolved when that lies under a root; else None."""
    try:
        resolved = Path(path).expanduser().resolve()
    except (OSError, RuntimeError):  # a loop of links
        return None
    return resolved if any(resolved == r or resolved.is_relative_to(r) for r in roots) else None


@dataclass(frozen=True)
class Listing:
    folder: Path | None  # None: the list of roots
    choices: list[tuple[str, str]]  # (label, value): value is OPEN or USE followed by a path
    note: str = ""  # what was left out


def list_folder(text: str, roots: list[Path], kind: str) -> Listing:
    """The entries of folder `text` (empty: the roots) for a field of path kind `kind` (dir, out, file, any):
    its subfolders, and model and config files where the field takes a file. Raises BrowseError outside the roots."""
    if not text.strip():
        return Listing(None, [(f"📁 {root}", OPEN + str(root)) for root in roots])
    folder = inside(Path(text.strip()), roots)
    if folder is None or not folder.is_dir():
        why = "outside the folders this GUI may list" if folder is None else "not a folder"
        raise BrowseError(f"{text.strip()} is {why} ({', '.join(str(r) for r in roots)}); the admin can add a "
                          "folder with --allowed-root")
    choices = []
    if kind != "file":
        choices.append((f"✓ use this folder: {folder}", USE + str(folder)))
    parent = folder.parent if folder not in roots else None
    choices.append(("⬆ up", OPEN + str(parent or "")))
    folders, files, skipped = _entries(folder, roots, kind)
    choices += [(f"📁 {p.name}/{_with_kind(p)}", OPEN + str(p)) for p in folders]
    choices += [(f"📄 {p.name}{_with_kind(p)}", USE + str(p)) for p in files]
    note = f"{skipped} more entries not listed" if skipped else ""
    return Listing(folder, choices, note)


def _with_kind(path: Path) -> str:
    kind = model_kind(path)
    return f" · {kind}" if kind else ""


def _entries(folder: Path, roots: list[Path], kind: str) -> tuple[list[Path], list[Path], int]:
    """(subfolders, files a field of `kind` takes, how many more were not listed), hidden and outside ones left out."""
    wanted = MODEL_SUFFIXES + CONFIG_SUFFIXES if kind in ("file", "any") else ()
    folders, files = [], []
    try:
        names = sorted(os.listdir(folder), key=str.casefold)
    except OSError:
        return [], [], 0
    for name in names:
        path = folder / name
        if name.startswith(".") or inside(path, roots) is None:  # a link out of the roots is not shown
            continue
        if path.is_dir():
            folders.append(path)
        elif path.suffix.lower() in wanted:
            files.append(path)
    shown_folders = folders[:MAX_LISTED]
    shown_files = files[:MAX_LISTED - len(shown_folders)]
    return shown_folders, shown_files, len(folders) + len(files) - len(shown_folders) - len(shown_files)


def start_listing(text: str, roots: list[Path], kind: str) -> Listing:
    """What Browse shows first: the field's folder (a file's folder) when it lies under a root, else the roots."""
    path = inside(Path(text.strip()), roots) if text.strip() else None
    while path is not None and not path.is_dir():
        path = inside(path.parent, roots)
    return list_folder(str(path or ""), roots, kind)


def pick(value: str, roots: list[Path], kind: str) -> tuple[Listing | None, str | None]:
    """What choosing `value` does: (the listing to show next, None) or (None, the path to fill in)."""
    if value.startswith(USE):
        path = inside(Path(value[len(USE):]), roots)
        if path is None:
            raise BrowseError(f"{value[len(USE):]} is outside the folders this GUI may list")
        return None, str(path)
    return list_folder(value.removeprefix(OPEN), roots, kind), None


def browsable_textbox(kind: str, **textbox: Any) -> gr.Textbox:
    """A path field (gr.Textbox keyword arguments) with a Browse button inside it and the list it opens beside it.

    The button is the textbox's own submit button (Enter opens the list too) and the list one hidden dropdown: a
    page holds a hundred path fields, and every component more slows its loading."""
    field = gr.Textbox(submit_btn="Browse…", **textbox)
    add_listing(field, kind)
    return field


def add_listing(field: gr.Textbox, kind: str, roots: Callable[[], list[Path]] = current_roots) -> gr.Dropdown:
    """The list `field`'s submit (its Browse button) opens; picking a file or `use this folder` fills the field."""
    listing = gr.Dropdown(choices=[], value=None, visible=False, label="Pick a folder or file", interactive=True,
                          elem_id=f"{field.elem_id}-browse" if field.elem_id else None, elem_classes=["browse-list"])

    def shown(found: Listing) -> dict:
        where = str(found.folder) if found.folder else "the folders this GUI may list"
        info = where + (f" ({found.note})" if found.note else "")
        return gr.Dropdown(choices=found.choices, value=None, visible=True, info=info)

    def on_open(text: str) -> dict:
        return shown(start_listing(str(text or ""), roots(), kind))

    def on_pick(value: str) -> tuple[dict, dict]:
        try:
            found, path = pick(str(value or ""), roots(), kind)
        except BrowseError as err:
            return gr.Dropdown(choices=[], value=None, info=str(err)), gr.skip()
        if path is not None:
            return gr.Dropdown(visible=False, value=None), path
        return shown(found), gr.skip()

    field.submit(on_open, inputs=field, outputs=listing, show_progress="hidden")
    listing.input(on_pick, inputs=listing, outputs=[listing, field], show_progress="hidden")
    return listing
