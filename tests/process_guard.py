"""Honest markers: a test that starts a trainer, a job, a worker or the app as a process (see `heavy`), or a
multiprocessing worker in a fresh interpreter (see `fresh_interpreter`), is marked
`slow` (or `browser`), so the fast part (-m "not slow and not browser") stays fast. conftest.py
installs these hooks; a test that breaks the rule fails with the command it started.

ATELIER_PROCESS_LOG=<file> appends every process a test starts (its node id and argv) to that file, marked or not.
"""
from __future__ import annotations

import multiprocessing.process
import os
import re
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

_current: list[pytest.Item] = []  # the test being set up, run or torn down
_started: dict[str, list[list[str]]] = {}  # node id -> the heavy commands it started, unmarked tests only
_original_init = subprocess.Popen.__init__
_original_start = multiprocessing.process.BaseProcess.start


def heavy(argv: Sequence[str]) -> bool:
    """A Python process that runs a trainer, job or tool of ours (`-m trainers ...`, the launcher), accelerate,
    TensorBoard or the app. Not a `python -c` probe (a fresh interpreter that checks what an import loads, or how a
    signal is handled: fast on purpose; one that imports the model libraries is marked by hand), a stand-in script
    (tests/helpers.py) or a tool like git."""
    if not argv or re.fullmatch(r"python[0-9.]*", Path(argv[0]).name) is None:
        return False
    args = list(argv[1:])
    if "-m" in args[:-1]:
        return args[args.index("-m") + 1].split(".")[0] in {"trainers", "accelerate", "tensorboard"}
    return bool(args) and Path(args[0]).name == "app.py"


def _argv(args: Any) -> list[str]:
    if isinstance(args, (str, bytes, os.PathLike)):
        return [os.fsdecode(args)]
    return [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in args]


def _note(argv: list[str], is_heavy: bool) -> None:
    if not _current:
        return
    item = _current[-1]
    log = os.environ.get("ATELIER_PROCESS_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"{item.nodeid}\t{' '.join(argv)}\n")
    marked = item.get_closest_marker("slow") or item.get_closest_marker("browser")
    if is_heavy and not marked:
        _started.setdefault(item.nodeid, []).append(argv)


def _watching_init(self: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
    argv = _argv(args)
    _note(argv, heavy(argv))
    _original_init(self, args, *rest, **kwargs)


def fresh_interpreter(process: multiprocessing.process.BaseProcess) -> bool:
    """A multiprocessing worker that starts a new interpreter (spawn, forkserver: torch's spawn of ranks, a
    DataLoader's workers under spawn), which imports what it runs anew. A fork of the test process costs
    milliseconds and is not one."""
    method = getattr(process, "_start_method", None) or multiprocessing.get_start_method(allow_none=True) or "fork"
    return method != "fork"


def _watching_start(self: multiprocessing.process.BaseProcess) -> None:
    target = getattr(self, "_target", None)
    _note(["multiprocessing", self.name, getattr(target, "__qualname__", repr(target))], fresh_interpreter(self))
    _original_start(self)


def install() -> None:
    subprocess.Popen.__init__ = _watching_init  # type: ignore[method-assign]
    multiprocessing.process.BaseProcess.start = _watching_start  # type: ignore[method-assign]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _current.append(item)
    try:
        return (yield)
    finally:
        _current.pop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    result = yield
    started = _started.pop(item.nodeid, None)
    if started:
        commands = "\n  ".join(" ".join(a) for a in started)
        pytest.fail(f"{item.nodeid} starts a trainer, job, worker or app process but is not marked slow "
                    f"(@pytest.mark.slow):\n  {commands}", pytrace=False)
    return result
