"""Files in and out of the server for remote users: a dataset uploaded into a new folder, a run's results
downloaded. Torch-free.

Uploads land whole or not at all: every member's name, size and compression ratio, the upload's totals and the free
disk space are checked before the first byte is written; then everything is streamed (bytes counted as they come)
into a hidden staging folder inside the datasets folder that is renamed into place at the end, so a failed or
refused upload leaves nothing, nothing is ever written outside the new folder, and an existing folder is never
written into.
Downloads are built only from what the run itself reports (its output, saves and samples, its config and log)
and placed in the run folder, the one folder the page serves files from.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import threading
import unicodedata
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from trainers.core.fsio import atomic_dir, atomic_path
from trainers.core.paths import NAME_MAX, PATH_MAX, name_problem
from trainers.core.rundir import CONFIG, HEALTH, LOG, SCORES
from trainers.data.kohya_folders import IMAGE_EXTENSIONS, parse_folder_name
from trainers.data.probe import ImageSkipped, probe_image

DATASET_EXTENSIONS = IMAGE_EXTENSIONS | {".txt", ".caption", ".json", ".toml"}
DOWNLOADS = "downloads"  # inside the run folder
RATIO_FLOOR = 16 << 20  # below this many unpacked bytes, any compression ratio is harmless (flat masks, captions)
KEEP_FREE_BYTES = 512 << 20  # left free on the datasets disk after an upload
_STAGING_EXTRA = 32  # bytes the hidden staging folder adds to the dataset name (see fsio.temp_name)
_SLASH_LIKE = ("SOLIDUS", "SLASH")  # unicode names of characters that look like a path separator


class TransferError(ValueError):
    """A refused upload or download, with a message for the page."""


@dataclass(frozen=True)
class UploadLimits:
    """What one upload may hold; each limit names the app.py flag that raises it."""

    max_upload_bytes: int = 8 << 30  # one uploaded file, enforced by Gradio while it arrives
    max_unpacked_bytes: int = 20 << 30  # every file of one upload, unpacked
    max_files: int = 100_000
    max_ratio: float = 100.0  # unpacked / packed bytes, of each zip member and of each zip (above RATIO_FLOOR)


LIMITS = UploadLimits()  # app.py sets the flags' values


@dataclass
class Upload:
    folder: Path  # the dataset folder (what train_data_dir is set to)
    images: int = 0
    captions: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass
class _Member:
    parts: tuple[str, ...]  # where it goes, relative to the new dataset folder
    source: Path | tuple[zipfile.ZipFile, zipfile.ZipInfo]
    size: int  # unpacked bytes (a zip member never yields more than its declared size)
    shown: str  # its name for messages: `archive.zip: member` or the file's name


_RESERVED: set[Path] = set()  # dataset folders being uploaded into right now
_RESERVED_LOCK = threading.Lock()


def save_upload(files: Sequence[Path | str], name: str, datasets_dir: Path, repeats: int = 1,
                limits: UploadLimits | None = None) -> Upload:
    """Put uploaded images, captions and zips of them into the new folder `datasets_dir/name`.

    Folders of the kohya layout (`10_sks dog/`) are kept as they are; loose files go into `<repeats>_<name>/`.
    Every member is checked (its name, sizes, the disk's free space) before the first byte is written, into a
    hidden staging folder inside `datasets_dir` that is renamed into place only when the whole upload is in.
    """
    limits = limits or LIMITS
    problem = name_problem(name) or _part_problem(name)
    if problem:
        raise TransferError(f"dataset name {problem}")
    if len(os.fsencode(name)) > NAME_MAX - _STAGING_EXTRA:
        raise TransferError(f"dataset name is too long: use at most {NAME_MAX - _STAGING_EXTRA} bytes")
    if not files:
        raise TransferError("no files uploaded: add images (and .txt captions) or a .zip of them")
    datasets_dir = Path(datasets_dir).expanduser().absolute()
    final = datasets_dir / name
    upload = Upload(final)
    with _reserved(final), contextlib.ExitStack() as archives:
        members = [m for f in files for m in _members(Path(f), upload.notes, limits, archives)]
        kohya = any(len(m.parts) > 1 and parse_folder_name(m.parts[-2]) for m in members)
        room = PATH_MAX - 1 - len(os.fsencode(str(final))) - _STAGING_EXTRA  # bytes left for a member's path
        members = _placed(members, kohya, f"{repeats}_{name}", room, upload.notes)
        upload.images = sum(Path(m.parts[-1]).suffix.lower() in IMAGE_EXTENSIONS for m in members)
        upload.captions = sum(Path(m.parts[-1]).suffix.lower() in (".txt", ".caption") for m in members)
        if not upload.images:
            raise _no_images(upload.notes)
        _check_totals(members, limits, datasets_dir)
        with atomic_dir(final) as staging:
            _write_all(members, staging, limits)
            upload.images -= _drop_non_images(members, staging, upload.notes)
            if not upload.images:
                raise _no_images(upload.notes)
    if not kohya:
        upload.notes.append(f"loose files went into {repeats}_{name}/ ({repeats} repeat(s) an epoch); rename the "
                            "folder to `<repeats>_<name>` to change that")
    return upload


@contextlib.contextmanager
def _reserved(final: Path) -> Iterator[None]:
    """`final` for this upload alone: two uploads of one name at once never write into each other."""
    with _RESERVED_LOCK:
        if final in _RESERVED or final.exists() or final.is_symlink():
            raise TransferError(f"{final} exists already; pick another dataset name (nothing was written into it)")
        _RESERVED.add(final)
    try:
        yield
    finally:
        with _RESERVED_LOCK:
            _RESERVED.discard(final)


def _members(path: Path, notes: list[str], limits: UploadLimits,
             archives: contextlib.ExitStack) -> Iterator[_Member]:
    """The dataset files of an uploaded file or zip, with safe relative names; the rest is named in notes."""
    if path.suffix.lower() != ".zip":  # Gradio keeps an uploaded file's own name in its temp path
        parts, why = _name_parts(path.name)
        if why:
            notes.append(f"skipped {path.name!r}: {why}")
        elif _wanted(parts, path.name, notes):
            yield _Member(parts, path, path.stat().st_size, path.name)
        return
    try:
        archive = archives.enter_context(zipfile.ZipFile(path))
    except (zipfile.BadZipFile, OSError) as err:
        raise TransferError(f"{path.name} is not a readable zip file ({err})") from None
    infos = [i for i in archive.infolist() if not i.is_dir()]
    if len(infos) > limits.max_files:  # before reading every name of a zip of millions
        raise TransferError(f"{path.name} holds {len(infos)} files: more than {limits.max_files} in one upload; "
                            "raise it with --max-upload-files")
    _check_ratio(f"{path.name}", sum(i.file_size for i in infos), path.stat().st_size, limits)
    entries = []
    for info in infos:
        shown = f"{path.name}: {info.filename!r}"
        parts, why = _member_parts(info)
        if why:
            notes.append(f"skipped {shown}: {why}")
            continue
        _check_ratio(shown, info.file_size, info.compress_size, limits)
        entries.append((info, parts, shown))
    tops = {p[0] for _, p, _ in entries if len(p) > 1}
    strip = len(tops) == 1 and all(len(p) > 1 for _, p, _ in entries) and not parse_folder_name(next(iter(tops)))
    for info, parts, shown in entries:
        parts = parts[1:] if strip else parts  # one wrapping folder (my_data/...) is not part of the layout
        if _wanted(parts, shown, notes):
            yield _Member(parts, (archive, info), info.file_size, shown)


def _member_parts(info: zipfile.ZipInfo) -> tuple[tuple[str, ...], str | None]:
    """A zip member's relative path as parts, or why it is not unpacked."""
    if stat.S_ISLNK(info.external_attr >> 16):
        return (), "a symbolic link"
    if info.flag_bits & 0x1:
        return (), "encrypted (unpack it and upload the files, or a zip without a password)"
    return _name_parts(info.filename)


def _name_parts(name: str) -> tuple[tuple[str, ...], str | None]:
    """A relative path (`/` or `\\` between folders) as parts, or why it cannot be written inside a folder."""
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return (), "an absolute path (only paths inside the zip are unpacked)"
    parts = tuple(name.replace("\\", "/").split("/"))
    if any(p in ("", ".", "..") for p in parts):
        return (), "its path holds '..', '.' or an empty folder name"
    if parts[0] == "__MACOSX" or any(p.startswith(".") for p in parts):
        return (), "a hidden or macOS resource entry"
    problem = next((why for p in parts if (why := _part_problem(p))), None)
    return (parts, None) if problem is None else ((), f"a name in its path {problem}")


def _part_problem(part: str) -> str | None:
    """Why one file or folder name cannot be written as given (a look-alike of a separator, too long, ...)."""
    if len(os.fsencode(part)) > NAME_MAX:
        return f"is {len(os.fsencode(part))} bytes long (a name may have at most {NAME_MAX})"
    if any(unicodedata.category(c) in ("Cc", "Cf") for c in part):
        return "holds a NUL, control or invisible formatting character"
    if any(any(word in unicodedata.name(c, "") for word in _SLASH_LIKE) for c in part if ord(c) > 127):
        return "holds a character that looks like a slash"
    folded = unicodedata.normalize("NFKC", part)
    if any(c in folded for c in "/\\:") or folded in (".", "..") or folded.startswith("."):
        return "reads as a path (a colon, a leading dot, or a slash or dot in look-alike characters)"
    return None


def _wanted(parts: tuple[str, ...], shown: str, notes: list[str]) -> bool:
    if Path(parts[-1]).suffix.lower() in DATASET_EXTENSIONS:
        return True
    notes.append(f"skipped {shown}: not an image or caption file")
    return False


def _placed(members: list[_Member], kohya: bool, loose_folder: str, room: int, notes: list[str]) -> list[_Member]:
    """Members at their place in the dataset (loose ones in `loose_folder`), one per name: names that differ only
    by case or unicode form are one file on Windows and macOS, and one caption's image. A path longer than `room`
    bytes would not fit the filesystem's path limit."""
    kept: dict[str, _Member] = {}
    for member in members:
        if not kohya or len(member.parts) == 1:
            member.parts = (loose_folder, member.parts[-1])
        relative = "/".join(member.parts)
        if len(os.fsencode(relative)) > room:
            notes.append(f"skipped {member.shown}: its path is {len(os.fsencode(relative))} bytes long; at most "
                         f"{room} fit under {PATH_MAX} bytes with the dataset folder")
            continue
        key = unicodedata.normalize("NFC", relative).casefold()
        if key in kept:
            notes.append(f"{'/'.join(member.parts)} came twice (names differ at most by case); the first one is kept")
            continue
        kept[key] = member
    return list(kept.values())


def _check_ratio(shown: str, unpacked: int, packed: int, limits: UploadLimits) -> None:
    if unpacked > RATIO_FLOOR and unpacked > limits.max_ratio * max(packed, 1):
        raise TransferError(f"{shown} unpacks to {size_text(unpacked)} from {size_text(packed)} "
                            f"({unpacked / max(packed, 1):.0f} times): more than {limits.max_ratio:g} times is "
                            "refused as a zip bomb; raise it with --max-unzip-ratio")


def _check_totals(members: list[_Member], limits: UploadLimits, datasets_dir: Path) -> None:
    """The whole upload against the limits and the free disk space, before anything is written."""
    if len(members) > limits.max_files:
        raise TransferError(f"{len(members)} files: more than {limits.max_files} in one upload; raise it with "
                            "--max-upload-files")
    total = sum(m.size for m in members)
    if total > limits.max_unpacked_bytes:
        raise TransferError(f"the upload unpacks to {size_text(total)}: more than "
                            f"{size_text(limits.max_unpacked_bytes)}; raise it with --max-unpacked-size")
    probe = datasets_dir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < total + KEEP_FREE_BYTES:
        raise TransferError(f"not enough free disk space in {datasets_dir}: the upload unpacks to "
                            f"{size_text(total)} and {size_text(free)} is free ({size_text(KEEP_FREE_BYTES)} is kept "
                            "free); free some space or set --datasets-dir to a larger disk")


def _write_all(members: list[_Member], staging: Path, limits: UploadLimits) -> None:
    """Stream every member into `staging`, counting bytes as they come; each lands under `staging` or nowhere."""
    root = staging.resolve()
    written = 0
    for member in members:
        target = root.joinpath(*member.parts)
        if not Path(os.path.realpath(target)).is_relative_to(root):
            raise TransferError(f"{member.shown} would be written outside the dataset folder")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            written += _copy(member, target, limits.max_unpacked_bytes - written)
        except OSError as err:
            raise TransferError(f"could not write {member.shown} into {staging.parent}: "
                                f"{err.strerror or err}") from None
        except (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, NotImplementedError) as err:
            raise TransferError(f"{member.shown} cannot be unpacked ({err})") from None


def _no_images(notes: list[str]) -> TransferError:
    skipped = "".join(f"\n- {n}" for n in notes[:10])
    return TransferError(f"the upload holds no images (.png, .jpg, .jpeg, .webp, .bmp){skipped}")


def _drop_non_images(members: list[_Member], staging: Path, notes: list[str]) -> int:
    """Remove the files named as images whose content is none (a text file called fake.png), by the check the
    trainer's preflight makes; how many. Each is named in `notes`."""
    dropped = 0
    for member in members:
        if Path(member.parts[-1]).suffix.lower() not in IMAGE_EXTENSIONS:
            continue
        target = staging.joinpath(*member.parts)
        try:
            probe_image(target)
        except ImageSkipped as err:
            target.unlink()
            notes.append(f"skipped {member.shown}: named as an image, but {err.reason}")
            dropped += 1
    return dropped


def _copy(member: _Member, target: Path, budget: int) -> int:
    """Copy one member into the new file `target` (never through a link); its size. Stops past its declared size
    or the upload's budget of unpacked bytes."""
    allowed = min(member.size, budget)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    copied = 0
    with open(fd, "wb") as dst, _open_source(member) as src:
        while chunk := src.read(1 << 20):
            copied += len(chunk)
            if copied > allowed:
                raise TransferError(f"{member.shown} holds more than it declared: refused while unpacking "
                                    f"(more than {size_text(allowed)}; --max-unpacked-size)")
            dst.write(chunk)
    return copied


def _open_source(member: _Member) -> IO[bytes]:
    if isinstance(member.source, Path):
        return open(member.source, "rb")
    archive, info = member.source
    return archive.open(info)


def size_text(n: float) -> str:
    """Bytes for a message: 512 bytes, 1.5 MB, 20.0 GB (1024-based, as the flags read them)."""
    if n < 1024:
        return f"{n:.0f} bytes"
    for unit in ("KB", "MB", "GB"):
        n /= 1024
        if n < 1024 or unit == "GB":
            break
    return f"{n:.1f} {unit}"


# ---- downloads ----------------------------------------------------------------------------------------------

def result_files(run_dir: Path, output: str, checkpoints: Sequence[str], samples: Sequence[str]) -> list[Path]:
    """What a run produced and reported, that still exists: its output, saves, samples, config, log, scores and the
    saves' health reports."""
    reported = [output, *checkpoints, *samples, str(run_dir / CONFIG), str(run_dir / LOG), str(run_dir / SCORES),
                str(run_dir / HEALTH)]
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
