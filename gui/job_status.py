"""The status panel every job tab shows (Generate, Tools, Captions & masks): one heading with the job's state, its
progress (or what it does before the first progress event), the error, notes and the newest warnings, in that
order. Each tab says only its own progress line. No torch here."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gui.text import plain
from trainers.core.rundir import RunState

TITLES: dict[str, str] = {
    RunState.QUEUED: "Queued", RunState.STARTING: "Starting", RunState.RUNNING: "Running",
    RunState.STOPPING: "Stopping…", RunState.FINISHED: "Finished", RunState.FAILED: "Failed",
    RunState.STOPPED: "Stopped"}
SHOWN_WARNINGS = 5


def job_status_text(view: Any, label: str, progress: str | None, *, before: str = "Loading…",
                    titles: dict[str, str] = TITLES, error: str | None = None, notes: Sequence[str] = (),
                    extra: Sequence[str] = ()) -> str:
    """The panel's Markdown for a job's `view` (its state, error and warnings, as the tab's watcher read them):
    `### <state>: <label>`, then `extra` (e.g. what a queued job waits for), its `progress` line (`before` while
    it is active without one), the error (`error`: the view's as the tab shows it, plain text by default), `notes`
    and the last warnings."""
    lines = [f"### {titles.get(view.state, view.state)}: {label}", *extra]
    if progress:
        lines.append(progress)
    elif view.state.active and before:
        lines.append(before)
    shown_error = plain(view.error) if error is None and view.error else error
    if shown_error:
        lines.append(f"**Error:** {shown_error}")
    lines += notes
    if view.warnings:
        lines.append("**Warnings**\n" + "\n".join(f"- {plain(w)}" for w in view.warnings[-SHOWN_WARNINGS:]))
    return "\n\n".join(lines)
