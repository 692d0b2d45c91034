"""Whether a path a user typed can be used, decided before anything loads (torch-free).

Every path-like option goes through `path_problem`: NUL characters, names and paths longer than the
filesystem allows, system folders (/proc, /sys, /dev: reading /proc/self/environ as "sample prompts" would
leak the environment into images and logs), and the kind: an existing folder, an existing regular file, or an
output folder that exists as a folder or can be created. Filesystem errors become messages, never tracebacks.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

PathKind = Literal["dir", "file", "out", "any"]
NAME_MAX = 255  # bytes in one file or folder name (ext4, xfs, btrfs, apfs, ntfs in characters)
PATH_MAX = 4096
SYSTEM_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))


# C:/..., C:\..., \\server\share, .\x and ..\x: paths written on Windows
_WINDOWS = re.compile(r"^(?:[A-Za-z]:(?:[\\/]|$)|\\\\|\.\.?\\)")


def windows_path(text: str) -> bool:
    """Whether `text` is a Windows path (a config from another machine) on this POSIX machine, where it would name
    a relative file or folder such as ./C:/Users/..."""
    return os.name == "posix" and bool(_WINDOWS.match(text.strip()))


def _too_long(text: str) -> str | None:
    raw = os.fsencode(text)
    if len(raw) >= PATH_MAX:
        return f"is {len(raw)} bytes long; a path may have at most {PATH_MAX - 1}"
    longest = max((len(part) for part in raw.split(b"/")), default=0)
    if longest > NAME_MAX:
        return f"has a name of {longest} bytes; a file or folder name may have at most {NAME_MAX}"
    return None


def _system(path: Path) -> bool:
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop is reported by the kind check
        return False
    return any(resolved == root or root in resolved.parents for root in SYSTEM_ROOTS)


def text_problem(text: str) -> str | None:
    """Why `text` cannot name a path on any filesystem (a NUL character, a name or path too long); None when it can.
    Checked before `text` is given to any filesystem call, which would raise."""
    if "\0" in text:
        return "contains a NUL character; remove it"
    return _too_long(text)


def shortened(text: str, most: int = 120) -> str:
    """`text` for a message: a path thousands of characters long is cut, its start and end kept."""
    return text if len(text) <= most else f"{text[:most // 2]}…{text[-most // 2:]} ({len(text)} characters)"


def path_problem(text: str, kind: PathKind) -> str | None:
    """Why `text` cannot be used as a path of `kind`; None when it can. The message follows the path's name."""
    if "\0" in text:
        return text_problem(text)
    if windows_path(text):
        return (f"{shortened(text)} is a Windows path (the config was written on another machine): give the "
                f"{'folder' if kind in ('dir', 'out') else 'path'} on this machine")
    long = text_problem(text)
    if long:
        return long
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # ~name, and this machine has no user of that name
        return f"{text} starts with the home folder of a user this machine does not have; give the full path"
    if _system(path):
        return f"{text} is a system path (/proc, /sys or /dev), not a folder or file of yours"
    try:
        exists, is_dir, is_file = path.exists(), path.is_dir(), path.is_file()
    except OSError as err:
        return f"{text} cannot be read ({err.strerror or err})"
    if kind == "dir":
        if not exists:
            return f"folder not found: {text}"
        return None if is_dir else f"{text} is a file, not a folder"
    if kind == "file":
        if not exists:
            return f"file not found: {text}"
        return None if is_file else f"{text} is {'a folder' if is_dir else 'not a regular file'}, not a file"
    if kind == "out":
        return _output_problem(text, path, exists, is_dir)
    return None


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # owner/name, as the Hugging Face Hub names repositories


def is_hub_id(text: str) -> bool:
    """Whether a model option's `text` names a hub repository, not a local path: owner/name, with no `..` (a path
    climbing out of its folder is a path) and nothing on disk by that name. The page's checks and the loaders that
    fetch from the hub decide by this one function."""
    text = text.strip()
    if not HUB_ID.fullmatch(text) or ".." in text or text_problem(text):
        return False
    try:
        return not Path(text).exists()
    except OSError:
        return False


def _output_problem(text: str, path: Path, exists: bool, is_dir: bool) -> str | None:
    """An output folder: an existing folder, or one that can be created under the nearest existing folder."""
    if exists:
        return None if is_dir else f"{text} exists and is not a folder; give a folder (it is created if missing)"
    ancestor = path.absolute()
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{text} cannot be created: {ancestor} is a file"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"{text} cannot be created: {ancestor} is not writable"
    return None


def name_problem(name: str, longest_suffix: str = "") -> str | None:
    """A plain file name (no folders) that still fits the filesystem with `longest_suffix` appended."""
    if not name.strip() or any(c in name for c in "/\\\0"):
        return f"got {name!r}; use a plain file name without folders"
    size = len(os.fsencode(name + longest_suffix))
    if size > NAME_MAX:
        return f"is too long: with {longest_suffix!r} appended it has {size} bytes; a file name may have {NAME_MAX}"
    return None
