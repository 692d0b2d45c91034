"""One edit of a dataset at a time: a lock file in its backup folder, held (fcntl.flock) while an edit checks,
backs up and writes its captions, or while an undo puts them back. flock locks an open file, so two browser
sessions of one GUI (threads) and two GUIs (processes) exclude each other alike, and a killed process's lock goes
with it. A second edit waits up to LOCK_WAIT_S for the first to end, then is refused with a message naming the
dataset (nothing written)."""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

from trainers.dataset_edit.folders import Dataset, DatasetEditError

LOCK_FILE = "edit.lock"
LOCK_WAIT_S = 3.0
_POLL_S = 0.05


class DatasetBusy(DatasetEditError):
    """Another edit of the dataset holds its lock."""


def unwritable(dataset: Dataset, err: OSError) -> DatasetEditError:
    return DatasetEditError(f"cannot keep a backup in {dataset.backups} ({err.strerror or err}); nothing was "
                            "changed: make the dataset folder writable")


@contextlib.contextmanager
def edit_lock(dataset: Dataset, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the dataset's edit lock for the block; DatasetBusy when another edit holds it `wait_s` seconds on."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock (the caption checks still refuse a stale edit)
        yield
        return
    try:
        dataset.backups.mkdir(parents=True, exist_ok=True)
        fd = os.open(dataset.backups / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as err:
        raise unwritable(dataset, err) from None
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise DatasetBusy(f"another edit of {dataset.root} is being written (from another browser "
                                      "session or GUI); nothing was changed: try again when it ends") from None
                time.sleep(_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
