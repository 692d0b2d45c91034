"""The status panel every job tab shows (Generate, Tools, Captions & masks), built once here: the job the browser
shows (its own, else the one running now), Stop (with the tab's other buttons in its row), and the status, which
says the job's state, its progress (or what it does before the first progress event), the error, notes and the
newest warnings, in that order. A tab gives only its own progress line and its own outputs; the panel refreshes
them every second, each sent only when it changed. No torch here."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr

from gui.jobs import JobError
from gui.run_files import Watchers, list_runs
from gui.text import plain
from trainers.core.options.schema import ConfigError, ConfigIssue
from trainers.core.rundir import RunState, read_status

TITLES: dict[str, str] = {
    RunState.QUEUED: "Queued", RunState.STARTING: "Starting", RunState.RUNNING: "Running", RunState.PAUSED: "Paused",
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


class ActiveJob:
    """The job of `methods` (a tab's kinds of job) running now, if any, looked up at most every `ttl_s` seconds
    for all pages together: a browser that did not start it (another machine, a cleared storage) still shows it
    and can stop it."""

    def __init__(self, methods: tuple[str, ...], ttl_s: float = 2.0) -> None:
        self.ttl_s, self.methods = ttl_s, methods
        self._cached: tuple[float, Path | None, str] = (0.0, None, "")
        self._lock = threading.Lock()

    def find(self, runs_dir: Path) -> str:
        with self._lock:
            at, folder, job_id = self._cached
            if folder != runs_dir or time.monotonic() - at > self.ttl_s:
                job_id = next((r.run_id for r in list_runs(runs_dir)
                               if r.method in self.methods and r.state.active), "")
                self._cached = (time.monotonic(), runs_dir, job_id)
            return job_id

    def shown(self, runs_dir: Path, job_id: str) -> tuple[str, bool]:
        """(the job a page shows: its own `job_id`, else the one running now, or "" for none; whether it was
        adopted so)."""
        adopted = "" if job_id else self.find(runs_dir)
        job_id = job_id or adopted
        if not job_id or "/" in job_id or not (runs_dir / job_id).is_dir():
            return "", False
        return job_id, bool(adopted)


Button = tuple[str, str, str]  # (label, elem_id, variant) of a button in Stop's row
# (job id, its view, what it waits behind when queued) -> (change key, value) for the status, then each output
Updates = Callable[[str, Any, str], list[tuple[Hashable, Any]]]


@dataclass
class JobPanel:
    """A job tab's panel (`job_panel`): wire its refresh with `watch` and its Stop with `stoppable`."""

    runs_dir: Path
    jobs: Any  # gui.jobs.JobManager
    queue: Any  # gui.run_queue.RunQueue, or None where the page has no queue
    active: ActiveJob
    watchers: Watchers
    job: gr.BrowserState
    stop: gr.Button
    status: gr.Markdown
    buttons: dict[str, gr.Button] = field(default_factory=dict)  # the row's other buttons, by elem_id

    def shown(self, job_id: str) -> tuple[str, Any]:
        """(the job the page shows, or "", and its view, or None)."""
        job_id, _ = self.active.shown(self.runs_dir, job_id)
        return job_id, self.watchers.view(self.runs_dir / job_id) if job_id else None

    def waits_for(self, job_id: str, view: Any) -> str:
        """What a queued job waits behind (RunQueue.waits_for); "" when it is not queued or the page has no queue."""
        queued = view.state == RunState.QUEUED and self.queue is not None
        return self.queue.waits_for(self.runs_dir / job_id) if queued else ""

    def watch(self, outputs: Sequence[gr.components.Component], updates: Updates) -> None:
        """Every second, the status and `outputs` of the job the page shows, each sent only when its change key
        changed; a job the page adopted (one running that this browser did not start) becomes its job."""
        shown_components = [self.status, *outputs]

        def tick(job_id: str, shown: Any) -> list[Any]:
            job_id, adopted = self.active.shown(self.runs_dir, job_id)
            if not job_id:
                return [gr.skip()] * (len(shown_components) + 1) + [shown]
            view = self.watchers.view(self.runs_dir / job_id)
            pairs = updates(job_id, view, self.waits_for(job_id, view))
            keys = [(job_id, key) for key, _ in pairs]
            old = shown if isinstance(shown, list) and len(shown) == len(keys) else [None] * len(keys)
            sent = [value if key != before else gr.skip() for (_, value), key, before in zip(pairs, keys, old)]
            return [job_id if adopted else gr.skip(), *sent, keys]

        shown = gr.State(None)  # change keys of what this browser tab shows now
        gr.Timer(1.0).tick(tick, inputs=[self.job, shown], outputs=[self.job, *shown_components, shown],
                           show_progress="hidden")

    def stoppable(self, stopped: str, ended: Callable[[Any], str] | None = None) -> None:
        """Stop asks the job the page shows to stop and says `stopped` (what stopping keeps); a queued job is taken
        out of the queue instead. With `ended`, a job no longer active is not asked, and `ended(view)` is said."""

        def on_stop(job_id: str) -> str:
            job_id, view = self.shown(job_id)
            if not job_id:
                return "No job to stop."
            job_dir = self.runs_dir / job_id
            if self.queue is not None and RunState.of(read_status(job_dir).get("state")) == RunState.QUEUED:
                try:
                    self.queue.cancel(job_dir)
                except JobError as err:  # it started meanwhile
                    return f"### Not taken out of the queue\n{plain(err)}"
                return f"Took `{job_id}` out of the queue: it never started."
            if ended is not None and not view.state.active:
                return ended(view)
            self.jobs.stop(job_dir)
            return stopped

        self.stop.click(on_stop, inputs=self.job, outputs=self.status)


def job_panel(services: Any, active: ActiveJob, watchers: Watchers, *, name: str, prefix: str, hint: str,
              before: Sequence[Button] = (), after: Sequence[Button] = ()) -> JobPanel:
    """Render a job tab's panel in the current gradio context: the browser's job (kept under
    `atelier-<name>-job`), a row of the `before` buttons, Stop (`#<prefix>-stop`) and the `after` ones, and the
    status (`#<prefix>-status`, showing `hint` until a job is shown)."""
    job = gr.BrowserState("", storage_key=f"atelier-{name}-job")
    buttons: dict[str, gr.Button] = {}
    with gr.Row() if before or after else nullcontext():
        for label, elem_id, variant in before:
            buttons[elem_id] = gr.Button(label, variant=variant, elem_id=elem_id)  # type: ignore[arg-type]
        stop = gr.Button("Stop", variant="stop", elem_id=f"{prefix}-stop")
        for label, elem_id, variant in after:
            buttons[elem_id] = gr.Button(label, variant=variant, elem_id=elem_id)  # type: ignore[arg-type]
    status = gr.Markdown(hint, elem_id=f"{prefix}-status")
    return JobPanel(services.runs_dir, services.jobs, getattr(services, "queue", None), active, watchers, job, stop,
                    status, buttons)


def start_checked(make: Callable[[], Any], check: Callable[[Any], list[ConfigIssue]],
                  start: Callable[[Any], Path]) -> tuple[Path | None, str]:
    """Make a job's config, check it and launch it: (its folder, "") or (None, what to tell the user)."""
    try:
        cfg = make()
        issues = check(cfg)
        if issues:
            raise ConfigError(issues)
        return start(cfg), ""
    except ConfigError as err:
        return None, f"### Not started: fix these first\n{plain(err)}"
    except JobError as err:
        return None, f"### Not started\n{plain(err)}"
