"""Files in and out of the server for remote users: a dataset uploaded into a new folder, a run's results
downloaded. Torch-free.

Uploads land whole or not at all: everything is written into a hidden temp folder that is renamed into place
at the end, so a failed or refused upload leaves nothing, and an existing folder is never written into.
Downloads are built only from what the run itself reports (its output, saves and samples, its config and log)
and placed in the run folder, the one folder the page serves files from.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from trainers.core.fsio import atomic_dir, atomic_path
from trainers.core.paths import name_problem
from trainers.core.rundir import CONFIG, LOG
from trainers.data.kohya_folders import IMAGE_EXTENSIONS, parse_folder_name

DATASET_EXTENSIONS = IMAGE_EXTENSIONS | {".txt", ".caption", ".json", ".toml"}
MAX_UPLOAD_BYTES = 50 << 30  # unpacked: a zip bomb stops here
MAX_UPLOAD_FILES = 200_000
DOWNLOADS = "downloads"  # inside the run folder


class TransferError(ValueError):
    """A refused upload or download, with a message for the page."""


@dataclass
class Upload:
    folder: Path  # the dataset folder (what train_data_dir is set to)
    images: int = 0
    captions: int = 0
    notes: list[str] = field(default_factory=list)


def save_upload(files: Sequence[Path | str], name: str, datasets_dir: Path, repeats: int = 1) -> Upload:
    """Put uploaded images, captions and zips of them into the new folder `datasets_dir/name`.

    Folders of the kohya layout (`10_sks dog/`) are kept as they are; loose files go into `<repeats>_<name>/`.
    """
    problem = name_problem(name)
    if problem or name.startswith("."):
        raise TransferError(f"dataset name {problem or 'must not start with a dot'}")
    if not files:
        raise TransferError("no files uploaded: add images (and .txt captions) or a .zip of them")
    final = Path(datasets_dir) / name
    if final.exists():
        raise TransferError(f"{final} exists already; pick another dataset name (nothing was written into it)")
    upload = Upload(final)
    try:
        with atomic_dir(final) as staging:
            members = [m for f in files for m in _members(Path(f), upload.notes)]
            if len(members) > MAX_UPLOAD_FILES:
                raise TransferError(f"{len(members)} files: more than {MAX_UPLOAD_FILES} in one upload")
            kohya = any(len(parts) > 1 and parse_folder_name(parts[-2]) for parts, _ in members)
            written = 0
            for parts, source in members:
                if not kohya or len(parts) == 1:
                    parts = (f"{repeats}_{name}", parts[-1])
                target = staging.joinpath(*parts)
                if target.exists():
                    upload.notes.append(f"{'/'.join(parts)} came twice; the first one is kept")
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                written += _copy(source, target, MAX_UPLOAD_BYTES - written)
                suffix = target.suffix.lower()
                upload.images += suffix in IMAGE_EXTENSIONS
                upload.captions += suffix in (".txt", ".caption")
            if not upload.images:
                raise TransferError("the upload holds no images (.png, .jpg, .jpeg, .webp, .bmp)")
    except OSError as err:
        raise TransferError(f"could not write {final}: {err.strerror or err}") from None
    if not kohya:
        upload.notes.append(f"loose files went into {repeats}_{name}/ ({repeats} repeat(s) an epoch); rename the "
                            "folder to `<repeats>_<name>` to change that")
    return upload


def _members(path: Path, notes: list[str]) -> Iterable[tuple[tuple[str, ...], object]]:
    """(relative path parts, source) of each dataset file in an uploaded file or zip; the rest is named in notes."""
    if path.suffix.lower() == ".zip":
        try:
            archive = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as err:
            raise TransferError(f"{path.name} is not a readable zip file ({err})") from None
        entries = [(i, _safe_parts(i.filename)) for i in archive.infolist() if not i.is_dir()]
        entries = [(i, p) for i, p in entries if p and not _is_link(i)]
        tops = {p[0] for _, p in entries if len(p) > 1}
        strip = len(tops) == 1 and all(len(p) > 1 for _, p in entries) and not parse_folder_name(next(iter(tops)))
        for info, parts in entries:
            parts = parts[1:] if strip else parts  # one wrapping folder (my_data/...) is not part of the layout
            if _wanted(parts, notes, path.name):
                yield parts, (archive, info)
        return
    if _wanted((path.name,), notes, ""):  # Gradio keeps an uploaded file's own name in its temp path
        yield (path.name,), path


def _safe_parts(name: str) -> tuple[str, ...] | None:
    """A zip member's path as parts, or None for absolute paths, `..`, hidden and macOS resource entries."""
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if not parts or parts[0] == "/" or re.match(r"^[A-Za-z]:", parts[0]):
        return None
    if any(p in ("..", ".") or p.startswith(".") or p == "__MACOSX" or "\0" in p for p in parts):
        return None
    return tuple(parts)


def _is_link(info: zipfile.ZipInfo) -> bool:
    return stat.S_ISLNK(info.external_attr >> 16)


def _wanted(parts: tuple[str, ...], notes: list[str], archive: str) -> bool:
    if Path(parts[-1]).suffix.lower() in DATASET_EXTENSIONS:
        return True
    notes.append(f"skipped {'/'.join(parts)}{f' (in {archive})' if archive else ''}: not an image or caption file")
    return False


def _copy(source: object, target: Path, budget: int) -> int:
    """Copy one member into `target`; its size, refusing when the upload grows past the budget."""
    if isinstance(source, Path):
        size = source.stat().st_size
        if size > budget:
            raise TransferError(f"the upload is larger than {MAX_UPLOAD_BYTES >> 30} GB unpacked")
        shutil.copyfile(source, target)
        return size
    archive, info = source  # type: ignore[misc]
    copied = 0
    with archive.open(info) as src, open(target, "wb") as dst:
        while chunk := src.read(1 << 20):
            copied += len(chunk)
            if copied > budget:
                raise TransferError(f"the upload is larger than {MAX_UPLOAD_BYTES >> 30} GB unpacked")
            dst.write(chunk)
    return copied


# ---- downloads ----------------------------------------------------------------------------------------------

def result_files(run_dir: Path, output: str, checkpoints: Sequence[str], samples: Sequence[str]) -> list[Path]:
    """What a run produced and reported, that still exists: its output, saves, samples, config and log."""
    reported = [output, *checkpoints, *samples, str(run_dir / CONFIG), str(run_dir / LOG)]
    seen: dict[Path, None] = {}
    for text in reported:
        if text and Path(text).exists():
            seen.setdefault(Path(text), None)
    return list(seen)


def download_model(run_dir: Path, output: str) -> Path:
    """The run's output file, linked (or copied) into the run folder so the page can serve it."""
    source = Path(output) if output else None
    if source is None or not source.exists():
        raise TransferError("this run has no output file yet (it is saved at the end, or by Save now)")
    if source.is_dir():  # a diffusers folder: as a zip
        return download_zip(run_dir, [source], f"{source.name}.zip")
    target = run_dir / DOWNLOADS / source.name
    if not (target.exists() and target.stat().st_mtime >= source.stat().st_mtime):
        with atomic_path(target, durable=False) as tmp:
            try:
                os.link(source, tmp)
            except OSError:  # another filesystem
                shutil.copyfile(source, tmp)
    return target


def download_zip(run_dir: Path, files: Sequence[Path], name: str | None = None) -> Path:
    """One zip of `files` (folders whole) in the run folder; rebuilt when a file changed since."""
    target = run_dir / DOWNLOADS / (name or f"{run_dir.name}.zip")
    newest = max((f.stat().st_mtime for f in files if f.exists()), default=0.0)
    if target.exists() and target.stat().st_mtime >= newest:
        return target
    with atomic_path(target, durable=False) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as archive:
        for item in files:
            paths = [item] if item.is_file() else sorted(p for p in item.rglob("*") if p.is_file())
            base = run_dir if item.is_relative_to(run_dir) else item.parent  # samples/…, config.toml; saves by name
            for path in paths:
                archive.write(path, str(path.relative_to(base)))
    return target
