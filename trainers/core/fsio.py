"""Files written so that a crash never leaves half a file under a final name, and the one safetensors header reader.

One temp-name scheme for every file and folder we write: `.<final name>.tmp-<pid>-<random>` beside the
final path, renamed into place when complete. A folder being replaced is first renamed to
`.<name>.old-<pid>-<random>`, one being deleted to `.<name>.deleting-<pid>-<random>`. The pid in the
name says who owns the entry, so `clean_stale_temps` removes a dead process's leftovers at once.
Everything gets ordinary permissions that follow the umask (tempfile and safetensors would leave 0600,
which a ComfyUI or A1111 running as another user cannot read). Torch-free.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import shutil
import struct
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from trainers.core.processes import pid_alive

TEMP_KINDS = ("tmp", "old", "deleting")
_OURS = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old|deleting)-(?P<pid>\d+)(?:-[0-9a-f]{8})?$")
_SAFETENSORS_TEMP = re.compile(r"^\.tmp[A-Za-z0-9]{6}$")  # safetensors' own temp while it writes our temp file
_UNOWNED = re.compile(r"^\.(?P<name>.+)\.[^.]+\.tmp$")  # temp files of Atelier before 2026-11 (no owner recorded)
_UNOWNED_STALE_S = 600.0  # an unowned temp entry untouched this long is left over from a killed process
_HEADER_LIMIT = 100_000_000


def temp_name(final: Path, kind: str = "tmp") -> Path:
    """A fresh temp entry beside `final`, owned by this process."""
    return final.with_name(f".{final.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}")


def current_umask() -> int:
    try:  # Linux: read it without the racy set-and-restore
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_dir(folder: Path) -> None:
    """Make a rename durable; not every platform/filesystem allows fsync on a directory."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _finish_file(path: Path, durable: bool) -> None:
    os.chmod(path, 0o666 & ~current_umask())
    if durable:
        with open(path, "rb") as fh:
            os.fsync(fh.fileno())


@contextlib.contextmanager
def atomic_path(final: Path, durable: bool = True) -> Iterator[Path]:
    """Yield a temp path beside `final` to write; when the block succeeds, rename it into place.

    A crash at any moment leaves the old file or the new one under `final`, never half a file.
    `durable`: fsync the file and the folder (off for caches, which are rebuilt when lost).
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(final)
    try:
        yield tmp
        _finish_file(tmp, durable)
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    if durable:
        _fsync_dir(final.parent)


def atomic_write_text(final: Path, text: str) -> None:
    with atomic_path(final) as tmp:
        tmp.write_text(text, encoding="utf-8")


@contextlib.contextmanager
def atomic_dir(final: Path, may_replace: Callable[[Path], bool] | None = None,
               kind: str = "a save of ours") -> Iterator[Path]:
    """Yield an empty temp folder beside `final`; when the block succeeds, rename it into place.

    A SIGKILL at any moment leaves the previous `final` (or none) and at most hidden temp entries,
    never a half-written folder under the final name. An existing `final` is replaced only when
    `may_replace(final)` says so (default: always); otherwise FileExistsError ("... is not `kind`").
    """
    final = Path(final)
    if final.exists() and may_replace is not None and not may_replace(final):
        raise FileExistsError(f"{final} exists and is not {kind}; not replacing it")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp, old = temp_name(final), temp_name(final, "old")
    tmp.mkdir()
    try:
        yield tmp
        mask = current_umask()
        for part in sorted(tmp.rglob("*")):
            if part.is_dir():
                os.chmod(part, 0o777 & ~mask)
            elif part.is_file():
                _finish_file(part, durable=True)
        os.chmod(tmp, 0o777 & ~mask)
        _fsync_dir(tmp)
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        _fsync_dir(final.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def remove_save(path: Path) -> None:
    """Delete a save (file or folder); a folder is first renamed away, so it vanishes at once."""
    path = Path(path)
    if path.is_dir():
        doomed = temp_name(path, "deleting")
        os.replace(path, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def clean_stale_temps(folder: Path, prefix: str, now: float | None = None) -> list[Path]:
    """Remove temp entries of saves named `prefix...` in `folder` left by a process that is gone; returns them.

    An entry whose owner is dead goes at once (a folder replaced half-way is put back first);
    unowned temps (safetensors' own, older Atelier versions') go when untouched for 10 minutes.
    """
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        return []
    now = time.time() if now is None else now
    removed = []
    for entry in folder.iterdir():
        ours = _OURS.match(entry.name)
        try:
            if ours and ours["name"].startswith(prefix):
                owner = int(ours["pid"])
                if owner != os.getpid() and pid_alive(owner):
                    continue  # a live process is writing it
                original = folder / ours["name"]
                if ours["kind"] == "old" and not original.exists():  # killed between the two renames: put it back
                    os.replace(entry, original)
                    continue
            else:
                unowned = _UNOWNED.match(entry.name)
                if not (_SAFETENSORS_TEMP.match(entry.name) or unowned and unowned["name"].startswith(prefix)):
                    continue
                if now - entry.stat().st_mtime < _UNOWNED_STALE_S:
                    continue  # perhaps being written right now
        except FileNotFoundError:
            continue
        shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


class DamagedSafetensors(ValueError):
    """A .safetensors file whose header reads but whose tensors do not fit the file: cut short (an interrupted
    download or copy) or damaged. The message names the file and says how to fix it."""


# bytes per element of each safetensors dtype (the sub-byte float dtypes are left out: not checked by size)
_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2,
                "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "C64": 8, "I64": 8, "U64": 8, "F64": 8}


def read_safetensors_header(path: Path, whole: bool = False) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    """(tensor name -> shape, __metadata__) of a .safetensors file, read without loading a tensor.

    ValueError says why a file is not one (too short, header unreadable or not JSON). `whole` (the checks before
    loading): DamagedSafetensors (a ValueError) when its tensors do not fit the file as safetensors requires, each
    tensor's bytes as long as its dtype and shape say, one after another, ending where the file ends. Without it
    only the names and shapes are read (listings and estimates, which also take a header without its data).
    """
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as fh:
        raw = fh.read(8)
        (length,) = struct.unpack("<Q", raw) if len(raw) == 8 else (0,)
        if not 2 <= length <= min(size - 8, _HEADER_LIMIT):
            raise ValueError(f"{path} is not a safetensors file (its header is unreadable)")
        try:
            header = json.loads(fh.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ValueError(f"{path} is not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path} is not a safetensors file (its header is not a table)")
    metadata = header.pop("__metadata__", None) or {}
    tensors = {k: v for k, v in header.items() if isinstance(v, dict)}
    if whole:
        _check_tensor_bytes(path, tensors, size - 8 - length)
    return {k: tuple(v.get("shape", ())) for k, v in tensors.items()}, metadata


def _check_tensor_bytes(path: Path, tensors: dict[str, dict], data_bytes: int) -> None:
    """Raise DamagedSafetensors unless the tensors' data_offsets tile the `data_bytes` after the header exactly."""
    spans = []
    for name, entry in tensors.items():
        offsets, shape = entry.get("data_offsets"), entry.get("shape")
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(isinstance(o, int) for o in offsets)
                or not 0 <= offsets[0] <= offsets[1] or not isinstance(shape, list)
                or not all(isinstance(n, int) and n >= 0 for n in shape)):
            raise DamagedSafetensors(f"{path} is damaged: the header's entry of tensor {name!r} is not a dtype, shape "
                                     "and data_offsets: download or copy the file again")
        width = _DTYPE_BYTES.get(str(entry.get("dtype")))
        if width is not None and offsets[1] - offsets[0] != width * math.prod(shape):
            raise DamagedSafetensors(
                f"{path} is damaged: tensor {name!r} ({entry.get('dtype')} {shape}) takes {width * math.prod(shape)} "
                f"bytes, but its header gives it {offsets[1] - offsets[0]}: download or copy the file again")
        spans.append((offsets[0], offsets[1], name))
    end = 0
    for start, stop, name in sorted(spans):
        if start != end:
            raise DamagedSafetensors(f"{path} is damaged: tensor {name!r} starts at byte {start} of the data, the one "
                                     f"before it ends at {end}: download or copy the file again")
        end = stop
    if end > data_bytes:
        raise DamagedSafetensors(
            f"{path} is cut short: its header lists {end} bytes of tensors, but only {max(data_bytes, 0)} follow it "
            "(an interrupted download or copy?): download or copy the file again")
    if end < data_bytes:
        raise DamagedSafetensors(f"{path} is damaged: {data_bytes - end} bytes follow its last tensor, which "
                                 "safetensors refuses: download or copy the file again")


def pickle_problem(path: Path) -> str | None:
    """Why a PyTorch pickle (.ckpt, .pt, .bin) is cut short or damaged, read from its zip container's directory
    (torch.save's format since PyTorch 1.6) without unpickling; None when it looks whole or is not a zip (the old
    format is read only when it loads)."""
    path = Path(path)
    with open(path, "rb") as fh:
        if fh.read(4) != b"PK\x03\x04":
            return None
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return (f"{path} is cut short or damaged (a PyTorch zip file without its directory at the end: an "
                "interrupted download or copy?): download or copy the file again")
    size = path.stat().st_size
    if any(m.header_offset + m.compress_size > size for m in members):
        return f"{path} is cut short (its tensors end past the end of the file): download or copy the file again"
    return None


def safetensors_data_offset(path: Path) -> int:
    """Where the tensor data of a .safetensors file starts (after the 8-byte length and the header)."""
    with open(path, "rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
    return 8 + length
