"""A dataset opened for editing: its concepts (kohya `<repeats>_<name>` folders, the image folders of a dataset TOML,
the folders of a musubi-tuner video dataset TOML, or one flat folder) and each image or video clip with the whole
text of its caption file. Folders are listed by trainers.data's own scanners, so the tab shows the images a run would
read; the clips beside them are what a video run reads (trainers/dataset_edit/clip_view.py). Torch-free."""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from trainers.core.errors import BadInput, ConfigError
from trainers.core.options import options_for
from trainers.core.registry import FAMILY_NAMES, METHOD_NAMES
from trainers.data.clips import ClipError, ClipInfo, is_video_file, probe_clip
from trainers.data.dataset_toml import load_dataset_config
from trainers.data.kohya_folders import (
    DatasetLayoutError,
    normalize_caption_extension,
    parse_folder_name,
    scan_image_folder,
)
from trainers.data.probe import ImageSkipped, probe_image
from trainers.data.text_files import decode_caption
from trainers.data.video_toml import VideoDatasetSpec, is_musubi_dataset_config, read_dataset_toml, video_dataset_specs
from trainers.dataset_edit.clip_view import clip_files
from trainers.models.edit_rules import takes_controls

BACKUP_DIR = ".atelier_backup"  # inside the dataset; hidden, so no scanner reads it as images
Layout = Literal["kohya", "toml", "flat"]


class DatasetEditError(BadInput):
    """A dataset or an edit that cannot be used; the message names the file or field and how to fix it."""


@dataclass(frozen=True)
class Concept:
    folder: Path
    repeats: int
    tokens: str  # the caption of an image without a caption file (kohya: the folder name after `<repeats>_`)
    masks: Path | None = None  # a dataset TOML subset's conditioning_data_dir: its masks for masked_loss
    controls: Path | None = None  # its control_directory: an edit model's control images (trainers/data/edit_pairs)
    video: VideoDatasetSpec | None = None  # a musubi-tuner video dataset: how a video run cuts its clips

    @property
    def label(self) -> str:
        return f"{self.folder.name} (x{self.repeats})"


@dataclass
class Entry:
    image: Path
    concept: Concept
    caption_file: Path
    caption: str = ""  # the caption file's whole text as a run decodes it ("" without one)
    has_caption: bool = False
    encoding: str = ""  # why the caption file is not plain UTF-8 ("" when it is, or there is none)
    size: tuple[int, int] | None = None  # (width, height) as trained, EXIF orientation applied
    problem: str = ""  # why the image cannot be trained on: it is listed, and skipped by edits and statistics
    seen: str = ""  # the caption file's fingerprint when it was read (see fingerprint): an edit checks it is still so
    is_text: bool = True  # False: the caption file cannot be read as text (it trains as if there were none)
    clip: ClipInfo | None = None  # a video clip's frames and rate (`image` is then the clip file)


@dataclass
class Dataset:
    root: Path  # where the backups go: the kohya or flat folder, or the dataset TOML's folder
    layout: Layout
    concepts: list[Concept]
    entries: list[Entry]
    caption_extension: str = ".txt"
    notes: list[str] = field(default_factory=list)

    @property
    def backups(self) -> Path:
        return self.root / BACKUP_DIR

    @property
    def readable(self) -> list[Entry]:
        return [e for e in self.entries if not e.problem]

    def entry(self, image: Path | str) -> Entry:
        found = next((e for e in self.entries if e.image == Path(image)), None)
        if found is None:
            raise DatasetEditError(f"{image} is not an image of the dataset {self.root}; open the dataset again")
        return found


def open_dataset(path: Path | str, caption_extension: str = ".txt") -> Dataset:
    """The dataset at `path`: a folder of `<repeats>_<name>` folders (kohya), a dataset TOML (its subsets' image
    folders), or a folder of images. Raises DatasetEditError naming the path and the layouts it may have."""
    path = Path(str(path).strip()).expanduser().resolve()
    ext = caption_extension_of(caption_extension)
    if not str(path).strip() or not path.exists():
        raise DatasetEditError(f"dataset folder: {path} does not exist; give a folder of images, a folder of "
                               "<repeats>_<name> folders, or a dataset .toml")
    if path.is_file():
        if path.suffix.lower() != ".toml":
            raise DatasetEditError(f"dataset folder: {path} is a file; give its folder, or a dataset .toml")
        return _with_captions(path.parent, "toml", toml_concepts(path), ext)
    kohya = sorted((p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")), key=lambda p: p.name)
    concepts = [Concept(p, *parsed) for p in kohya if (parsed := parse_folder_name(p.name)) and parsed[0] >= 1]
    if concepts:
        return _with_captions(path, "kohya", concepts, ext)
    return _with_captions(path, "flat", [Concept(path, 1, "")], ext)


def caption_extension_of(text: str) -> str:
    """`txt`, `.txt` or ` .TXT ` as the extension captions are read with (empty: .txt)."""
    try:
        return normalize_caption_extension(text or ".txt")
    except ValueError as err:
        raise DatasetEditError(f"caption extension: {err}") from None


def option_defaults() -> dict[str, Any]:
    """Every dataset option at its default (the values a dataset TOML or a bucket setting starts from)."""
    return {o.name: o.default for o in options_for(METHOD_NAMES[0])}


@functools.lru_cache(maxsize=1)
def viewing_values() -> dict[str, Any]:
    """The options a dataset TOML is read with here, where no run says its model: as a masked_loss run of an edit
    model reads it, so a subset's conditioning_data_dir is its masks folder and its control_directory its controls."""
    edit_family = max(FAMILY_NAMES, key=lambda name: takes_controls({"model_family": name}))
    return {**option_defaults(), "masked_loss": True, "model_family": edit_family}


def toml_concepts(path: Path) -> list[Concept]:
    """The image_dir subsets of a dataset TOML, with their masks and control folders (see viewing_values); the
    folders of a musubi-tuner (video) dataset TOML."""
    warnings: list[str] = []
    try:
        raw = read_dataset_toml(path)
        if is_musubi_dataset_config(raw):
            specs = video_dataset_specs(raw, path.parent, warnings, path.name)
            return [Concept(s.directory, s.num_repeats, "", video=None if s.is_image else s) for s in specs
                    if s.directory is not None]
    except ConfigError as err:
        raise DatasetEditError(f"dataset config {path}: {err}") from None
    try:
        specs = load_dataset_config(path, viewing_values(), warnings, takes_controls(viewing_values()))
    except ConfigError as err:
        raise DatasetEditError(f"dataset config {path}: {err}") from None
    concepts = [Concept(s.path, s.repeats, s.tokens, s.masks, s.controls) for d in specs for s in d.subsets
                if s.kind == "folder"]
    if not concepts:
        raise DatasetEditError(f"dataset config {path} names no image_dir subsets; the Dataset tab edits the "
                               "captions beside images (metadata JSON subsets are not edited here)")
    return concepts


def _with_captions(root: Path, layout: Layout, concepts: list[Concept], ext: str) -> Dataset:
    dataset = Dataset(root, layout, concepts, [], ext)
    for concept in concepts:
        try:
            subset, notes = scan_image_folder(concept.folder, concept.repeats, concept.tokens, ext,
                                              field="dataset folder")
        except DatasetLayoutError as err:
            dataset.notes.append(str(err))
            continue
        dataset.notes += notes
        dataset.entries += [read_entry(item.path, concept, ext) for item in subset.images]
        dataset.entries += [read_entry(clip, concept, ext) for clip in clip_files(concept.folder)]
    return dataset


def fingerprint(raw: bytes | None) -> str:
    """What a caption file held, in short: the SHA-256 of its bytes; "" for no file."""
    return "" if raw is None else hashlib.sha256(raw).hexdigest()


def file_fingerprint(path: Path) -> str:
    """The fingerprint of the file at `path` now ("" when there is none; "unreadable" when it cannot be read)."""
    try:
        return fingerprint(path.read_bytes())
    except FileNotFoundError:
        return ""
    except OSError:
        return "unreadable"


def read_entry(image: Path, concept: Concept, ext: str) -> Entry:
    """An image or a video clip with its caption file's text and encoding, and its size (or why it cannot be trained
    on)."""
    entry = Entry(image, concept, image.with_suffix(ext))
    try:
        if is_video_file(image):
            entry.clip = probe_clip(image)
            entry.size = entry.clip.size
        else:
            entry.size = probe_image(image)
    except ImageSkipped as skipped:
        entry.problem = skipped.reason
    except ClipError as err:
        entry.problem = err.reason
    try:
        raw = entry.caption_file.read_bytes()
    except FileNotFoundError:
        return entry
    except OSError as err:
        entry.encoding, entry.seen = f"cannot be read ({err.strerror or err})", "unreadable"
        return entry
    entry.seen = fingerprint(raw)
    read = decode_caption(raw)
    entry.caption, entry.has_caption, entry.is_text = read.text or "", True, read.text is not None
    if read.problem:
        entry.encoding = read.problem + (f"; read as {read.read_as}" if read.read_as else "")
    elif raw != entry.caption.encode("utf-8"):
        entry.encoding = "has a byte-order mark or is UTF-16/UTF-32 (read as its mark says)"
    return entry
