"""The parts of benchmarks/gpu_check.py, each run in a forked process of its own under a time budget.

A part that raises, dies (an out-of-memory kill, a crash in a CUDA kernel) or runs past its budget is reported
with what it had measured by then, and the next part still runs. Forking after the heavy imports (torch,
diffusers, the trainers) spares each part their start-up; the parent never touches CUDA, so every child
initialises its own. A killed child takes its GPU memory with it.
"""
from __future__ import annotations

import multiprocessing as mp
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

MIN_START_S = 20.0  # a part is not started with less of the whole run's time left than this
ERROR_TAIL = 1500  # characters of a part's traceback kept in the result


class Skip(Exception):
    """A part that cannot run here (e.g. an optional script not given); its message says why."""


class PartContext:
    """What a running part gets: its settings, the results of the parts before it, and a line back to the
    parent for what it has measured so far (kept if the part is cut or dies later)."""

    def __init__(self, conn: Connection, settings: Any, earlier: dict[str, dict]) -> None:
        self._conn = conn
        self.settings = settings
        self.earlier = earlier

    def phase(self, text: str) -> None:
        """What the part is doing now (the report of a part cut in the middle names it)."""
        self._conn.send(("phase", text))

    def report(self, **fields: Any) -> None:
        """Measured values (plain data): merged into the part's result as they come."""
        self._conn.send(("data", fields))


@dataclass(frozen=True)
class Part:
    name: str
    what: str  # one line for the table: what it runs
    budget_s: float  # on the machine the check is sized for (one H100)
    run: Callable[[PartContext], None]


def run_parts(parts: list[Part], settings: Any, total_s: float, budget_s: float | None = None,
              on_result: Callable[[dict], None] | None = None) -> list[dict]:
    """Run `parts` in order, each under min(its budget, or `budget_s` for every part, the time left of
    `total_s`); the parts that no longer fit are listed as not run."""
    results: dict[str, dict] = {}
    started = time.monotonic()
    for part in parts:
        left = total_s - (time.monotonic() - started)
        if left < MIN_START_S:
            result = {"name": part.name, "what": part.what, "status": "not run",
                      "note": f"the run's {total_s:.0f} s were spent before it"}
        else:
            result = run_part(part, min(budget_s or part.budget_s, left), settings, dict(results))
        results[part.name] = result
        if on_result is not None:
            on_result(result)
    return list(results.values())


def run_part(part: Part, budget_s: float, settings: Any, earlier: dict[str, dict]) -> dict:
    """One part in a forked child, killed when it outlasts `budget_s`."""
    ctx = mp.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(part, send, settings, earlier), name=f"part-{part.name}", daemon=True)
    started = time.monotonic()
    child.start()
    send.close()  # the child's end: once the child exits, recv() raises EOFError
    result: dict[str, Any] = {"name": part.name, "what": part.what, "budget_s": round(budget_s)}
    phase, status = "starting", ""
    while not status:
        left = budget_s - (time.monotonic() - started)
        if left <= 0:
            child.kill()
            status, result["note"] = "cut", f"over its {budget_s:.0f} s budget while {phase}"
            break
        if not receive.poll(min(left, 1.0)):
            continue
        try:
            kind, payload = receive.recv()
        except EOFError:
            child.join(5)
            status, result["error"] = "error", f"the part's process died (exit code {child.exitcode}) while {phase}"
            break
        if kind == "phase":
            phase = payload
        elif kind == "data":
            result.update(payload)
        elif kind in ("done", "skipped", "error"):
            status = {"done": "ok"}.get(kind, kind)
            if payload:
                result["note" if kind == "skipped" else "error"] = payload
    child.join(10)
    if child.is_alive():
        child.kill()
        child.join()
    receive.close()
    result["status"] = status
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def _child(part: Part, conn: Connection, settings: Any, earlier: dict[str, dict]) -> None:
    try:
        part.run(PartContext(conn, settings, earlier))
        conn.send(("done", None))
    except Skip as why:
        conn.send(("skipped", str(why)))
    except BaseException as err:  # noqa: BLE001 - whatever went wrong is the part's result
        text = "".join(traceback.format_exception(err))
        conn.send(("error", f"{type(err).__name__}: {err}\n{text[-ERROR_TAIL:]}"))
    finally:
        conn.close()
        sys.stdout.flush()
        sys.stderr.flush()
