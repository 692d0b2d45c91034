"""One edit of a dataset at a time: a lock file in its backup folder, held (fcntl.flock) while an edit checks,
backs up and writes its captions, or while an undo puts them back. flock locks an open file, so two browser
sessions of one GUI (threads) and two GUIs (processes) exclude each other alike, and a killed process's lock goes
with it. A second edit waits up to LOCK_WAIT_S for the first to end, then is refused with a message naming the
dataset and, where it said so, who holds the lock (nothing written). A caption job takes the same lock around
each caption it writes (folder_lock), so a bulk edit never interleaves with it."""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from trainers.dataset_edit.folders import BACKUP_DIR, Dataset, DatasetEditError

LOCK_FILE = "edit.lock"
LOCK_WAIT_S = 3.0
_POLL_S = 0.05


class DatasetBusy(DatasetEditError):
    """Another edit of the dataset holds its lock."""


def unwritable(dataset: Dataset, err: OSError) -> DatasetEditError:
    return _unwritable(dataset.backups, err)


def _unwritable(backups: Path, err: OSError) -> DatasetEditError:
    return DatasetEditError(f"cannot keep a backup in {backups} ({err.strerror or err}); nothing was "
                            "changed: make the dataset folder writable")


@contextlib.contextmanager
def edit_lock(dataset: Dataset, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the dataset's edit lock for the block; DatasetBusy when another edit holds it `wait_s` seconds on."""
    with folder_lock(dataset.root, wait_s):
        yield


@contextlib.contextmanager
def folder_lock(root: Path, wait_s: float = LOCK_WAIT_S, holder: str = "") -> Iterator[None]:
    """edit_lock of the dataset folder `root`; `holder` (e.g. "the caption job runs/…") is written into the lock
    file while held, so that an edit it keeps out can say who holds it."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock (the caption checks still refuse a stale edit)
        yield
        return
    backups = root / BACKUP_DIR
    try:
        backups.mkdir(parents=True, exist_ok=True)
        fd = os.open(backups / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as err:
        raise _unwritable(backups, err) from None
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    who = _holder(fd)
                    said = (f"{who} is writing captions in {root}" if who else
                            f"another edit of {root} is being written (from another browser session or GUI)")
                    raise DatasetBusy(f"{said}; nothing was changed: try again when it ends") from None
                time.sleep(_POLL_S)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder.encode("utf-8"), 0)
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _holder(fd: int) -> str:
    try:
        return os.pread(fd, 500, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""
