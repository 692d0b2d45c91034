"""Requests from outside a running trainer: flag files in <run-dir>/control/ and signals.

Rank 0 looks, then tells every rank, so all processes act on the same step.
"""
from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

REQUESTS = ("stop", "save_now")


class Control:
    def __init__(self, run_dir: Path | None, accelerator: Any) -> None:
        self.folder = Path(run_dir) / "control" if run_dir is not None else None
        self.accelerator = accelerator
        self._signalled = False
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._signalled:  # a second Ctrl-C means now
            raise KeyboardInterrupt
        self._signalled = True

    def poll(self) -> set[str]:
        """Requests pending now (the same set on every rank); flag files are consumed."""
        found: set[str] = set()
        if self.accelerator.is_main_process:
            if self._signalled:
                found.add("stop")
            if self.folder is not None and self.folder.is_dir():
                for name in REQUESTS:
                    flag = self.folder / name
                    if flag.exists():
                        found.add(name)
                        flag.unlink(missing_ok=True)
        if self.accelerator.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            holder = [sorted(found)]
            broadcast_object_list(holder, from_process=0)
            found = set(holder[0])
        return found


def request(run_dir: Path, name: str) -> None:
    """Ask the trainer of `run_dir` for `name` (used by the GUI)."""
    if name not in REQUESTS:
        raise ValueError(f"unknown request {name!r}; known: {', '.join(REQUESTS)}")
    folder = Path(run_dir) / "control"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).touch()
