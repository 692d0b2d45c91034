"""A folder browser on the server for the page's path fields: a Browse button in each opens a list of the
folders and model files under the allowed roots; picking a folder opens it, picking a file (or "use this folder")
fills the field. Model files are listed with their kind (trainers.models.file_kind: headers only).

Only what lies under a root is listed, symlinks resolved: `..`, a link out of a root, or a value the browser did not
list is refused with a message. Torch-free.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from dataclasses import dataclass, replace
from pathlib import Path

import gradio as gr

from trainers.core.paths import shortened, text_problem
from trainers.models.file_kind import MODEL_SUFFIXES, model_kind

CONFIG_SUFFIXES = (".toml", ".json", ".txt")  # dataset configs, metadata JSON, sample prompts
MAX_LISTED = 500  # entries of one folder; the rest are counted
OPEN, USE = "open:", "use:"  # what picking an entry does: list that folder, or put the path into the field
ROOTS: list[Path] = []  # app.py sets them (browse_roots); empty: the home folder and the current folder


class BrowseError(ValueError):
    """A path the browser may not list; the message says which folders it may."""


def browse_roots(allowed: list[Path] | None, runs_dir: Path, datasets_dir: Path, models_dir: Path) -> list[Path]:
    """The folders the browser lists: the allowed roots (--allowed-root, or those of an exposed GUI); on this machine
    alone, the working folder (the repository: its demo/ model and data), the datasets, runs and models folders and
    the home folder. Symlinks resolved, missing ones left out."""
    candidates = allowed if allowed is not None else [Path.cwd(), datasets_dir, runs_dir, models_dir, Path.home()]
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
    if text_problem(str(path)):  # a NUL or an over-long path: the filesystem would raise
        return None
    try:
        resolved = Path(path).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):  # a loop of links, ~name of no user
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
    unusable = text_problem(text.strip())
    if unusable:
        raise BrowseError(f"the path {unusable}")
    folder = inside(Path(text.strip()), roots)
    if folder is None or not folder.is_dir():
        why = "outside the folders this GUI may list" if folder is None else "not a folder"
        raise BrowseError(f"{shortened(text.strip())} is {why} ({', '.join(str(r) for r in roots)}); the admin can "
                          "add a folder with --allowed-root")
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
    """What Browse shows first: the field's folder (a file's folder) when it lies under a root, else the roots (with
    why, for a field that holds no usable path)."""
    unusable = text_problem(text.strip())
    if unusable:
        return replace(list_folder("", roots, kind), note=f"the field's path {unusable}")
    path = inside(Path(text.strip()), roots) if text.strip() else None
    while path is not None and not path.is_dir():
        path = inside(path.parent, roots)
    return list_folder(str(path or ""), roots, kind)


def pick(value: str, roots: list[Path], kind: str) -> tuple[Listing | None, str | None]:
    """What choosing `value` does: (the listing to show next, None) or (None, the path to fill in)."""
    if value.startswith(USE):
        path = inside(Path(value[len(USE):]), roots)
        if path is None:
            raise BrowseError(f"{shortened(value[len(USE):])} is outside the folders this GUI may list")
        return None, str(path)
    return list_folder(value.removeprefix(OPEN), roots, kind), None


# Gradio checks a pick against the choices the list was built with (none: each listing is sent later), and raised
# "Value: open:... is not in the list of choices" as a red toast; `pick` itself refuses what lies outside the roots.
_ANY_PICK = {"allow_custom_value": True}

PANEL_CSS = """
#browse-panel {position: sticky; top: 0; z-index: 1000; box-shadow: 0 8px 32px rgba(0, 0, 0, .35);}
"""  # the page's one list stays in sight above whichever tab opened it


@dataclass
class _PathField:
    field: gr.Textbox
    kind: str
    name: str  # its label, shown above the list it opened


_OPEN_PANELS: list[list[_PathField]] = []  # the fields of each browse_panel being built, innermost last


def browsable_textbox(kind: str, **textbox: Any) -> gr.Textbox:
    """A path field (gr.Textbox keyword arguments) with a Browse button inside it (its own submit button: Enter opens
    the list too). Inside `browse_panel()` the fields share one list; outside one, the field gets a list of its own."""
    field = gr.Textbox(submit_btn="Browse…", **textbox)
    if _OPEN_PANELS:
        _OPEN_PANELS[-1].append(_PathField(field, kind, str(textbox.get("label") or "")))
    else:
        add_listing(field, kind)
    return field


@contextmanager
def browse_panel(roots: Callable[[], list[Path]] = current_roots) -> Iterator[None]:
    """The path fields made inside share one list, shown here and wired on leaving: a page holds a hundred path
    fields, and a list (and two events) for each made the page slow to build and to load."""
    with gr.Group(visible=False, elem_id="browse-panel") as panel:
        listing = gr.Dropdown(choices=[], value=None, label="Pick a folder or file", interactive=True,
                              elem_id="browse-list", elem_classes=["browse-list"], **_ANY_PICK)
        close = gr.Button("Close", size="sm", elem_id="browse-close")
    close.click(lambda: gr.Group(visible=False), outputs=panel, show_progress="hidden")
    fields: list[_PathField] = []
    _OPEN_PANELS.append(fields)
    try:
        yield
    finally:
        _OPEN_PANELS.pop()
    _wire_shared_listing(panel, listing, fields, roots)


def _shown(found: Listing, **extra: Any) -> dict:
    where = str(found.folder) if found.folder else "the folders this GUI may list"
    info = where + (f" ({found.note})" if found.note else "")
    return gr.Dropdown(choices=found.choices, value=None, visible=True, info=info, **extra)


def _picked(value: str, roots: list[Path], kind: str) -> tuple[dict, str | None]:
    """(the list's update, the path to put in the field or None) for choosing `value` in the list."""
    try:
        found, path = pick(str(value or ""), roots, kind)
    except BrowseError as err:
        return gr.Dropdown(choices=[], value=None, info=str(err)), None
    return (gr.Dropdown(value=None), path) if path is not None else (_shown(found), None)


def _wire_shared_listing(panel: gr.Group, listing: gr.Dropdown, fields: list[_PathField],
                         roots: Callable[[], list[Path]]) -> None:
    target = gr.State(-1)  # which field the list fills: its index in `fields`

    def opener(index: int) -> Callable[[str], tuple[dict, dict, int]]:
        def on_open(text: str) -> tuple[dict, dict, int]:
            found = start_listing(str(text or ""), roots(), fields[index].kind)
            return gr.Group(visible=True), _shown(found, label=f"Pick for: {fields[index].name}"), index
        return on_open

    def on_pick(value: str, index: int) -> list[Any]:
        if not 0 <= index < len(fields):
            return [gr.skip()] * (len(fields) + 2)
        update, path = _picked(value, roots(), fields[index].kind)
        filled = [path if i == index and path is not None else gr.skip() for i in range(len(fields))]
        return [gr.Group(visible=path is None), update, *filled]

    path_fields = [f.field for f in fields]
    for index, path_field in enumerate(path_fields):
        path_field.submit(opener(index), inputs=path_field, outputs=[panel, listing, target], show_progress="hidden")
    listing.input(on_pick, inputs=[listing, target], outputs=[panel, listing, *path_fields],
                  show_progress="hidden")


def add_listing(field: gr.Textbox, kind: str, roots: Callable[[], list[Path]] = current_roots) -> gr.Dropdown:
    """A list of its own beside `field`, which its submit (its Browse button) opens; picking a file or `use this
    folder` fills the field."""
    listing = gr.Dropdown(choices=[], value=None, visible=False, label="Pick a folder or file", interactive=True,
                          elem_id=f"{field.elem_id}-browse" if field.elem_id else None, elem_classes=["browse-list"],
                          **_ANY_PICK)

    def on_pick(value: str) -> tuple[dict, Any]:
        update, path = _picked(value, roots(), kind)
        return (update, gr.skip()) if path is None else (gr.Dropdown(visible=False, value=None), path)

    field.submit(lambda text: _shown(start_listing(str(text or ""), roots(), kind)), inputs=field, outputs=listing,
                 show_progress="hidden")
    listing.input(on_pick, inputs=listing, outputs=[listing, field], show_progress="hidden")
    return listing
