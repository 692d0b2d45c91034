"""Scanner for kohya sd-scripts "DreamBooth-style" dataset folders.

Layout (``train_data_dir`` is the parent folder)::

    train_data_dir/
      10_sks dog/            <repeats>_<tokens>
        img001.png
        img001.txt           caption (optional; the folder tokens are used if missing)
      5_photo of a dog/
        ...

Behaviour mirrors kohya's ``DreamBoothDataset`` where it matters for
training (non-recursive image glob, caption file = image stem + caption
extension, folder tokens as the fallback caption, ``ss_dataset_dirs`` and
``ss_tag_frequency`` metadata), but layout mistakes that kohya silently skips
are reported as :class:`DatasetLayoutError` with an explanation of the
expected layout.

This module must stay light: it only uses the standard library (no torch,
no PIL) because it runs before any model is loaded and inside the GUI process.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path

from trainers.core.errors import BadInput
from trainers.data.text_files import decode_caption

__all__ = [
    "IMAGE_EXTENSIONS",
    "DatasetLayoutError",
    "ImageItem",
    "Subset",
    "DatasetScan",
    "parse_folder_name",
    "normalize_caption_extension",
    "scan_image_folder",
    "scan_kohya_folders",
    "match_masks",
]

#: Image file extensions recognised in a subset folder (compared lower-cased).
IMAGE_EXTENSIONS: frozenset[str] = frozenset({".png", ".jpg", ".jpeg", ".webp", ".bmp"})

# "<repeats>_<tokens>": ASCII digits only (``\d`` would accept other scripts' digits).
_FOLDER_RE = re.compile(r"^([0-9]+)_(.*)$", re.DOTALL)
# Something that looks like an attempt at a number before the first "_": "0", "-1", "1.5", "+3".
_NUMBERISH_RE = re.compile(r"^[+-]?(?:[0-9]+(?:[.,][0-9]*)?|[.,][0-9]+)$")

_MAX_LISTED = 5  # how many file / folder names an error message lists before "…"
_EXAMPLE_TOKENS = "sks dog"
_EXAMPLE_REPEATS = 10


class DatasetLayoutError(BadInput):
    """The dataset folder does not follow the kohya ``<repeats>_<tokens>`` layout.

    The message names the config field and the path, says what was found and
    shows the expected layout.  ``field`` and ``path`` are kept as attributes
    for callers (e.g. a GUI) that want to highlight the offending field.
    """

    def __init__(self, message: str, *, field: str = "train_data_dir", path: Path | None = None):
        super().__init__(message)
        self.field = field
        self.path = path


@dataclass
class ImageItem:
    path: Path
    caption: str
    caption_from_file: bool


@dataclass
class Subset:
    folder: Path
    repeats: int
    tokens: str
    images: list[ImageItem] = dc_field(default_factory=list)

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def num_captions_found(self) -> int:
        return sum(1 for item in self.images if item.caption_from_file)

    @property
    def num_missing_captions(self) -> int:
        return sum(1 for item in self.images if not item.caption_from_file)

    @property
    def num_repeated_images(self) -> int:
        return len(self.images) * self.repeats


@dataclass
class DatasetScan:
    root: Path
    subsets: list[Subset]
    warnings: list[str] = dc_field(default_factory=list)
    caption_extension: str = ".txt"

    @property
    def num_images(self) -> int:
        """Number of distinct image files across all subsets."""
        return len({item.path for subset in self.subsets for item in subset.images})

    @property
    def num_repeated_images(self) -> int:
        """Images seen per epoch: sum over subsets of images x repeats."""
        return sum(subset.num_repeated_images for subset in self.subsets)

    def dataset_dirs_summary(self) -> dict[str, dict]:
        """kohya's ``ss_dataset_dirs``: ``{folder_name: {"n_repeats": r, "img_count": n}}``.

        Only subsets that contain images are listed (empty ones are skipped by the scan).
        """
        return {
            subset.folder.name: {"n_repeats": subset.repeats, "img_count": len(subset.images)}
            for subset in self.subsets
        }

    def tag_frequency(self) -> dict[str, dict[str, int]]:
        """kohya's ``ss_tag_frequency``.

        Per folder name, every image's caption (the file caption, or the folder
        tokens when it has none) is split on commas; tags are stripped,
        lower-cased (as kohya does) and counted once per image (not per repeat).
        """
        result: dict[str, dict[str, int]] = {}
        for subset in self.subsets:
            counts: Counter[str] = Counter()
            for item in subset.images:
                for tag in item.caption.split(","):
                    tag = tag.strip()
                    if tag:
                        counts[tag.lower()] += 1
            result[subset.folder.name] = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        return result

    def report(self) -> str:
        """A short human-readable summary, one line per subset folder."""
        lines = [f"Dataset {self.root} (captions: *{self.caption_extension}):"]
        for subset in self.subsets:
            n = len(subset.images)
            line = (
                f"  {subset.folder.name}: {n} image{'s' if n != 1 else ''}, "
                f"{subset.num_captions_found} caption{'s' if subset.num_captions_found != 1 else ''} found, "
                f"{subset.num_missing_captions} missing"
            )
            if subset.num_missing_captions:
                line += f' (using "{subset.tokens}")' if subset.tokens else " (empty caption)"
            line += f", x{subset.repeats} repeats = {subset.num_repeated_images} per epoch"
            lines.append(line)
        lines.append(
            f"  total: {self.num_images} image{'s' if self.num_images != 1 else ''}, "
            f"{self.num_repeated_images} per epoch with repeats"
        )
        for warning in self.warnings:
            lines.append(f"  warning: {warning}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- helpers


def normalize_caption_extension(caption_extension: str) -> str:
    """``"txt"`` / ``".txt"`` / ``" .TXT "`` -> ``".txt"`` (case preserved apart from stripping)."""
    ext = (caption_extension or "").strip()
    if not ext.startswith("."):
        ext = "." + ext
    if ext == "." or any(sep in ext for sep in ("/", "\\")):
        raise ValueError(f"invalid caption_extension {caption_extension!r}: expected something like '.txt'")
    return ext


def parse_folder_name(name: str) -> tuple[int, str] | None:
    """``"10_sks dog"`` -> ``(10, "sks dog")``; ``None`` when there is no ``<digits>_`` prefix.

    Note: a repeats value of 0 is returned as is; the scanner rejects it.
    """
    match = _FOLDER_RE.match(name)
    if match is None:
        return None
    return int(match.group(1)), match.group(2)


def _is_image_name(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def _list_names(names: list[str], limit: int = _MAX_LISTED) -> str:
    shown = ", ".join(names[:limit])
    if len(names) > limit:
        shown += f", … (+{len(names) - limit} more)"
    return shown


def _expected_layout(root: Path, example_image: str = "img001.png", caption_extension: str = ".txt") -> str:
    stem = os.path.splitext(example_image)[0]
    return (
        "Expected:\n"
        f"  {root}/\n"
        f"    {_EXAMPLE_REPEATS}_{_EXAMPLE_TOKENS}/\n"
        f"      {example_image}\n"
        f"      {stem}{caption_extension}   (caption, optional)"
    )


def _prefix(field: str, root: Path) -> str:
    return f'{field} = "{root}"'


def _suggest_name(name: str) -> str:
    """A valid kohya folder name for a folder lacking a usable repeats prefix."""
    head, sep, tail = name.partition("_")
    if sep and _NUMBERISH_RE.match(head):
        tokens = tail
    else:
        tokens = name
    return f"{_EXAMPLE_REPEATS}_{tokens}" if tokens else f"{_EXAMPLE_REPEATS}_{_EXAMPLE_TOKENS}"


def _describe_bad_folder(name: str) -> str:
    suggestion = _suggest_name(name)
    head, sep, _tail = name.partition("_")
    parsed = parse_folder_name(name)
    if parsed is not None and parsed[0] == 0:
        return f'"{name}" has 0 repeats, so its images would never be used: rename it to "{suggestion}"'
    if sep and _NUMBERISH_RE.match(head):
        return (
            f'"{name}" has repeats "{head}", which is not a whole number >= 1: '
            f'rename it to "{suggestion}"'
        )
    if not sep and _NUMBERISH_RE.match(name):
        return f'"{name}" has no _<tokens> part after the repeats: rename it to e.g. "{name}_{_EXAMPLE_TOKENS}"'
    return f'"{name}" has no <repeats>_ prefix: rename it to "{suggestion}"'


def _entries(folder: Path, notes: list[str] | None = None) -> list[tuple[str, str]]:
    """(name, kind) of each visible entry: kind "file", "dir" or "other". One entry that cannot be followed (a
    symlink to itself, a loop, a link to nothing) is skipped and named in `notes`; it never hides its folder.
    OSError only when the folder itself cannot be listed."""
    found: list[tuple[str, str]] = []
    with os.scandir(folder) as it:
        for entry in it:
            if entry.name.startswith("."):
                continue
            try:
                kind = "file" if entry.is_file() else "dir" if entry.is_dir() else "other"
            except OSError as e:  # ELOOP: a link to itself or a loop of links
                if notes is not None:
                    notes.append(f'"{folder.name}/{entry.name}" cannot be followed ({e.strerror or e}); skipped')
                continue
            if kind == "other" and entry.is_symlink():
                if notes is not None and (_is_image_name(entry.name) or not os.path.splitext(entry.name)[1]):
                    target = os.readlink(entry.path)
                    notes.append(f'"{folder.name}/{entry.name}" is a link to {target}, which does not exist; skipped')
                continue
            found.append((entry.name, kind))
    return sorted(found)


def _decode_caption(raw: bytes, path: Path, field: str, root: Path, strict: bool,
                    notes: list[str] | None) -> str | None:
    """The caption file's text (text_files.decode_caption); one that is not UTF-8 (or marked UTF-16/32) is named in
    `notes`, or stops the scan when `strict`. None: not a caption, named."""
    read = decode_caption(raw)
    if not read.problem:
        return read.text
    if strict:
        instead = f"read it as {read.read_as}" if read.read_as else "train its image without it"
        raise DatasetLayoutError(f"{_prefix(field, root)}: caption file {path} {read.problem}. Fix: save it as "
                                 f"UTF-8 text (or set strict_captions = false to {instead}).", field=field, path=path)
    if notes is not None and read.text is None:
        notes.append(f"caption file {path} {read.problem}; skipped: its image trains as if it had no caption file. "
                     "Fix: save it as UTF-8 text")
    elif notes is not None:
        notes.append(f"caption file {path} {read.problem}; read as {read.read_as}: {read.text.strip()[:60]!r}. "
                     "Re-save it as UTF-8 to be sure")
    return read.text


def _read_caption(path: Path, field: str, root: Path, all_lines: bool = False, strict: bool = False,
                  notes: list[str] | None = None) -> tuple[str, bool]:
    """Returns ``(caption, had_extra_lines)``; caption is "" for an empty file.

    Like kohya (without wildcards) only the first line is used; we skip leading
    blank lines so a stray empty first line does not blank the caption. With
    ``all_lines`` (enable_wildcard) the non-empty lines are kept, joined by newlines:
    each sample picks one.
    """
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DatasetLayoutError(
            f"{_prefix(field, root)}: caption file {path} could not be read: {e.strerror or e}.",
            field=field,
            path=path,
        ) from e
    text = _decode_caption(raw, path, field, root, strict, notes) or ""
    lines = [line.strip() for line in text.splitlines()]
    non_empty = [line for line in lines if line]
    if not non_empty:
        return "", False
    if all_lines:
        return "\n".join(non_empty), False
    return non_empty[0], len(non_empty) > 1


def _scan_subset(folder: Path, repeats: int, tokens: str, caption_ext: str, field: str, root: Path,
                 warnings: list[str], all_lines: bool = False, strict: bool = False) -> Subset:
    try:
        entries = _entries(folder, warnings)
    except OSError as e:  # skipped and reported: the other folders can still train
        warnings.append(f'folder "{folder}" could not be read ({e.strerror or e}); its images are skipped')
        return Subset(folder=folder, repeats=repeats, tokens=tokens, images=[])

    files = {name for name, kind in entries if kind == "file"}
    files_lower: dict[str, str] = {}
    for name in sorted(files):
        files_lower.setdefault(name.lower(), name)

    images: list[ImageItem] = []
    multi_line: list[str] = []
    for name in sorted(n for n in files if _is_image_name(n)):
        stem = os.path.splitext(name)[0]
        cap_name = stem + caption_ext
        if cap_name not in files:
            # tolerate case differences (e.g. "IMG1.PNG" + "IMG1.TXT") as case-insensitive filesystems do
            cap_name = files_lower.get(cap_name.lower(), "")
        caption, from_file = "", False
        if cap_name and cap_name != name:
            caption, extra = _read_caption(folder / cap_name, field, root, all_lines, strict, warnings)
            from_file = bool(caption)
            if extra:
                multi_line.append(cap_name)
        if not from_file:
            caption = tokens
        images.append(ImageItem(path=folder / name, caption=caption, caption_from_file=from_file))

    if multi_line:
        warnings.append(
            f'"{folder.name}": {len(multi_line)} caption file(s) have several lines; only the first '
            f"non-empty line is used (as kohya does): {_list_names(multi_line)}"
        )
    if images and not tokens and any(not item.caption_from_file for item in images):
        n = sum(1 for item in images if not item.caption_from_file)
        warnings.append(
            f'"{folder.name}": {n} image(s) have no caption file and the folder has no tokens after '
            f'"{repeats}_", so they train with an empty caption'
        )
    return Subset(folder=folder, repeats=repeats, tokens=tokens, images=images)


def scan_image_folder(folder: Path, repeats: int, tokens: str, caption_extension: str = ".txt",
                      field: str = "image_dir", all_lines: bool = False, strict: bool = False
                      ) -> tuple[Subset, list[str]]:
    """One folder of images (an sd-scripts dataset-config subset's ``image_dir``) and its warnings.

    Unlike ``train_data_dir`` the folder holds the images itself; its name carries no repeats.
    ``all_lines``: keep every line of multi-line caption files (enable_wildcard).
    """
    folder = Path(folder).expanduser()
    warnings: list[str] = []
    if not folder.is_dir():
        raise DatasetLayoutError(f'{_prefix(field, folder)}: folder not found (it must hold the images '
                                 "directly).", field=field, path=folder)
    subset = _scan_subset(folder, repeats, tokens, normalize_caption_extension(caption_extension), field, folder,
                          warnings, all_lines, strict)
    return subset, warnings


# --------------------------------------------------------------------------- main entry point


def scan_kohya_folders(root: Path, caption_extension: str = ".txt", field: str = "train_data_dir",
                       all_lines: bool = False, strict: bool = False) -> DatasetScan:
    """Scan a kohya DreamBooth-style ``train_data_dir``.

    Raises :class:`DatasetLayoutError` (a ``ValueError``) with a specific,
    actionable message when the layout cannot be trained on.  Non-fatal
    oddities are collected in ``DatasetScan.warnings``.
    """
    root = Path(root).expanduser()
    caption_ext = normalize_caption_extension(caption_extension)
    pre = _prefix(field, root)

    def fail(msg: str, path: Path = root) -> DatasetLayoutError:
        return DatasetLayoutError(msg, field=field, path=path)

    if not root.exists():
        parent = root.parent
        hint = "" if parent.is_dir() else f" (its parent folder {parent} does not exist either)"
        raise fail(
            f"{pre}: this folder does not exist{hint}.\n{_expected_layout(root, caption_extension=caption_ext)}\n"
            f"Fix: set {field} to the folder that contains your <repeats>_<tokens> subfolders."
        )
    if not root.is_dir():
        hint = ""
        if _is_image_name(root.name):
            hint = " It looks like an image; point to the folder above the image folder instead."
        raise fail(
            f"{pre}: this is a file, not a folder.{hint}\n{_expected_layout(root, caption_extension=caption_ext)}\n"
            f"Fix: set {field} to the folder that contains your <repeats>_<tokens> subfolders."
        )

    warnings: list[str] = []
    try:
        entries = _entries(root, warnings)
    except OSError as e:
        raise fail(f"{pre}: this folder could not be read: {e.strerror or e}.") from e

    dirs = [name for name, kind in entries if kind == "dir"]
    files = [name for name, kind in entries if kind != "dir"]
    root_images = [name for name in files if _is_image_name(name)]
    other_files = [name for name in files if not _is_image_name(name)]

    if not entries:
        raise fail(
            f"{pre}: this folder is empty.\n{_expected_layout(root, caption_extension=caption_ext)}\n"
            f'Fix: create a subfolder such as "{root / f"{_EXAMPLE_REPEATS}_{_EXAMPLE_TOKENS}"}" and put your images in it.'
        )

    valid: list[tuple[str, int, str]] = []
    invalid: list[str] = []
    for name in dirs:
        parsed = parse_folder_name(name)
        if parsed is None or parsed[0] < 1:
            invalid.append(name)
        else:
            valid.append((name, parsed[0], parsed[1]))

    def dir_image_names(name: str) -> list[str]:
        try:
            return [n for n, kind in _entries(root / name) if kind == "file" and _is_image_name(n)]
        except OSError:
            return []

    if not valid:
        if root_images:
            example = root_images[0]
            msg = (
                f"{pre}: images were found directly in this folder ({len(root_images)} file"
                f"{'s' if len(root_images) != 1 else ''}: {_list_names(root_images)}), "
                "but kohya layout needs them in subfolders named <repeats>_<tokens>."
            )
            if invalid:
                msg += "\nSubfolders found, none usable:\n" + "\n".join(
                    f"  - {_describe_bad_folder(n)}" for n in invalid
                )
            msg += (
                f"\n{_expected_layout(root, example, caption_ext)}\n"
                f'Fix: move the images into a folder such as "{root / f"{_EXAMPLE_REPEATS}_{_EXAMPLE_TOKENS}"}".'
            )
            raise fail(msg)
        if invalid:
            raise fail(
                f"{pre}: found {len(invalid)} subfolder{'s' if len(invalid) != 1 else ''} but none is named "
                "<repeats>_<tokens>:\n"
                + "\n".join(f"  - {_describe_bad_folder(n)}" for n in invalid)
                + f"\n{_expected_layout(root, caption_extension=caption_ext)}\n"
                "Fix: rename the subfolders as shown (the number is how many times each image is "
                "repeated per epoch; the rest is the caption used when an image has no caption file)."
            )
        raise fail(
            f"{pre}: no image subfolders found, only {len(other_files)} other file"
            f"{'s' if len(other_files) != 1 else ''} ({_list_names(other_files)}); images must be "
            f"{', '.join(sorted(IMAGE_EXTENSIONS))}.\n{_expected_layout(root, caption_extension=caption_ext)}\n"
            f'Fix: create a subfolder such as "{root / f"{_EXAMPLE_REPEATS}_{_EXAMPLE_TOKENS}"}" and put your images in it.'
        )

    # There are valid subfolders. Invalid ones holding images would be silently skipped by
    # kohya; that almost always is a mistake, so it is an error. Empty ones are only warned about.
    bad_with_images = [n for n in invalid if dir_image_names(n)]
    if bad_with_images:
        raise fail(
            f"{pre}: {len(bad_with_images)} subfolder{'s' if len(bad_with_images) != 1 else ''} with images "
            "would be ignored because the name is not <repeats>_<tokens>:\n"
            + "\n".join(f"  - {_describe_bad_folder(n)}" for n in bad_with_images)
            + f"\n{_expected_layout(root, caption_extension=caption_ext)}\n"
            f"Fix: rename them as shown, or move them out of {field}."
        )
    for name in invalid:
        warnings.append(f"ignored subfolder without images: {_describe_bad_folder(name)}")
    if root_images:
        warnings.append(
            f"{len(root_images)} image(s) directly in {root} are ignored (only <repeats>_<tokens> "
            f"subfolders are read): {_list_names(root_images)}"
        )

    subsets = [
        _scan_subset(root / name, repeats, tokens, caption_ext, field, root, warnings, all_lines, strict)
        for name, repeats, tokens in valid
    ]

    empty = [s for s in subsets if not s.images]
    if len(empty) == len(subsets):
        details = []
        for s in empty:
            try:
                content = [n + ("/" if kind == "dir" else "") for n, kind in _entries(s.folder)]
                what = f"contains only {_list_names(content)}" if content else "empty"
            except OSError as e:
                what = f"could not be read ({e.strerror or e})"
            details.append(f'  - "{s.folder.name}": {what}')
        raise fail(
            f"{pre}: no images found in any subfolder (images must be directly inside, with extension "
            f"{', '.join(sorted(IMAGE_EXTENSIONS))}; subfolders are not searched recursively):\n"
            + "\n".join(details)
            + f"\n{_expected_layout(root, caption_extension=caption_ext)}\n"
            "Fix: put the images directly in the <repeats>_<tokens> folders."
        )
    for s in empty:
        warnings.append(f'subfolder "{s.folder.name}" contains no images and is skipped')

    return DatasetScan(
        root=root,
        subsets=[s for s in subsets if s.images],
        warnings=warnings,
        caption_extension=caption_ext,
    )


def match_masks(folder: Path, images: list[Path]) -> tuple[dict[Path, Path], list[str]]:
    """The mask image of each image in ``folder`` (masked_loss): the file with the image's stem and any
    image extension, as sd-scripts' ``conditioning_data_dir``; the stem's case may differ, as on
    case-insensitive filesystems. Also returns the names of mask files no image matches."""
    try:
        names = [n for n, kind in _entries(folder) if kind == "file" and _is_image_name(n)]
    except OSError:  # a missing mask folder: every image of it is reported as lacking its mask
        names = []
    by_stem: dict[str, str] = {}
    by_lower: dict[str, str] = {}
    for name in names:
        stem = os.path.splitext(name)[0]
        by_stem.setdefault(stem, name)
        by_lower.setdefault(stem.lower(), name)
    found: dict[Path, Path] = {}
    for image in images:
        stem = os.path.splitext(image.name)[0]
        name = by_stem.get(stem) or by_lower.get(stem.lower())
        if name is not None:
            found[image] = folder / name
    used = {path.name for path in found.values()}
    return found, [name for name in names if name not in used]
