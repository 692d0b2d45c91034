"""The page: one tab per method (generated form + actions), a Runs tab, and the live run panel."""
from __future__ import annotations

import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from gui.cheap_updates import cheapen_updates
from gui.checks import CheckReport, check_form
from gui.config_import import wire_imports
from gui.dataset_tab import build_dataset_tab
from gui.demo_build import DemoBuild, build_demo_notice, check_start
from gui.docs_pages import DOCS_LINKS
from gui.folder_browser import PANEL_CSS, browse_panel
from gui.caption_tab import build_caption_tab
from gui.forms import Form, build_form
from gui.generate_tab import build_generate_tab, wire_compare_button
from gui.jobs import JobError, JobManager
from gui.multinode import machines_panel
from gui.page_config import lighten_page_config
from gui.presets import PresetError, Presets, label
from gui.refresh_budget import RefreshBudget
from gui.run_files import RunSummary, Watchers, format_duration, list_runs
from gui.run_panel import RunPanel, build_run_panel, is_generation_job, render, view_for
from gui.run_queue import RunQueue
from gui.session_state import lighten_sessions
from gui.text import plain
from gui.title import title_line
from gui.tools_tab import build_tools_tab
from gui.transfer_ui import build_downloads, build_tensorboard, build_upload, wire_downloads, wire_tensorboard
from trainers.core.registry import METHOD_NAMES, METHODS
from trainers.core.rundir import RunState

CSS = """
.atelier-bar {position: relative; height: 26px; border-radius: 13px; background: var(--block-background-fill);
  border: 1px solid var(--border-color-primary); overflow: hidden;}
.atelier-fill {height: 100%; background: var(--color-accent); transition: width .6s ease;}
.atelier-bar span {position: absolute; inset: 0; text-align: center; line-height: 26px; font-weight: 600;}
.group-problems {color: var(--error-text-color); border-left: 3px solid var(--error-border-color);
  padding-left: .6em;}
.group-problems pre, .group-problems code {white-space: pre-wrap; overflow-wrap: anywhere;}
.essentials {padding: .4em;}
#run-column {position: sticky; top: 0; align-self: flex-start; max-height: 100vh; overflow-y: auto;}
#run-gallery .grid-wrap {min-height: 0; max-height: none;}
#run-gallery .grid-container {grid-template-columns: repeat(auto-fill, minmax(72px, 1fr)); grid-auto-rows: auto;}
#run-gallery .gallery-item {aspect-ratio: 1;}
""" + PANEL_CSS


@dataclass
class Services:
    runs_dir: Path
    jobs: JobManager
    presets: Presets
    watchers: Watchers
    allowed_roots: list[Path] | None = None  # None: paths anywhere on this machine
    datasets_dir: Path | None = None  # where uploaded datasets go (default: datasets/ beside the runs folder)
    queue: RunQueue | None = None  # Start while the GPUs are busy queues the run (None: refuses it)
    demo: DemoBuild | None = None  # app.py --demo: the demo being prepared (Start on it waits for it)
    refreshes: RefreshBudget = field(default_factory=RefreshBudget)  # how often each open page's run panel refreshes

    @property
    def uploads(self) -> Path:
        return self.datasets_dir or self.runs_dir.parent / "datasets"


def build_page(services: Services, initial_preset: str | None = None) -> gr.Blocks:
    with gr.Blocks(title="Atelier") as page:
        viewed = gr.BrowserState("", storage_key="atelier-viewed-run")
        gr.Markdown(f"# Atelier\n{title_line()}", elem_id="page-title")
        gr.Markdown(DOCS_LINKS, elem_id="docs-links")
        build_demo_notice(services.demo)
        with gr.Row(equal_height=False):
            with gr.Column(scale=3), browse_panel():  # every tab's path fields share one Browse list
                with gr.Tabs(overflow_behavior="wrap") as tabs:  # on a phone every tab stays in sight
                    method_tabs = {}
                    for i, method in enumerate(METHODS):
                        with gr.Tab(method.title, id=method.name):
                            method_tabs[method.name] = _method_tab(
                                method.name, services, viewed, opening_preset(services.presets, method.name,
                                                                              initial_preset, i == 0), page)
                    with gr.Tab("Dataset", id="dataset"):
                        dataset = build_dataset_tab(services)
                    with gr.Tab("Generate", id="generate"):
                        generate = build_generate_tab(services)
                    with gr.Tab("Tools", id="tools"):
                        build_tools_tab(services)
                    with gr.Tab("Captions & masks", id="captions"):
                        build_caption_tab(services, dataset)  # a finished job shows the dataset again
                    with gr.Tab("Runs", id="runs"):
                        _runs_tab(services, viewed)
            with gr.Column(scale=2, elem_id="run-column"):
                panel = build_run_panel()
                stop = gr.Button("Stop this run", variant="stop", visible=False, elem_id="stop-run")
                resume = gr.Button("Resume this run", visible=False, elem_id="resume-run")
                pause = gr.Button("Pause", visible=False, elem_id="pause-run")  # "Continue" while paused
                downloads = build_downloads()
                tensorboard = build_tensorboard()
        wire_imports(method_tabs, tabs, services.runs_dir)
        _wire_panel(services, viewed, panel, stop, resume, page, pause)
        wire_downloads(downloads, viewed, services.watchers, services.runs_dir)
        wire_tensorboard(tensorboard, viewed, services.runs_dir)
        wire_compare_button(panel.compare, viewed, services.runs_dir, generate, tabs)
    keep_api_docs_off(page)
    lighten_sessions()
    lighten_page_config()
    cheapen_updates()
    return page


QUEUE_IDLE_S = 0.02  # Gradio's queue, with nothing to do, looks for work this often (its default: every 1 ms)
PROGRESS_IDLE_S = 0.1  # and for progress to send this often (its default: every 10 ms)


def queue_page(page: gr.Blocks, concurrency: int = 8) -> None:
    """The page's event queue, which waits for work without spinning: at Gradio's 1 ms its loop alone took 5% of a
    core from a training run, page or no page. An event then starts at most QUEUE_IDLE_S later."""
    page.queue(default_concurrency_limit=concurrency)
    page._queue.sleep_when_free = QUEUE_IDLE_S
    page._queue.progress_update_sleep_when_free = PROGRESS_IDLE_S


def keep_api_docs_off(page: gr.Blocks) -> None:
    """The page's events stay callable but out of Gradio's API docs, which every page load would otherwise carry:
    5 MB of code snippets for its ~250 events, rebuilt for each request."""
    for fn in page.fns.values():
        if fn.api_visibility == "public":
            fn.api_visibility = "undocumented"


def _wire_panel(services: Services, viewed: gr.BrowserState, panel: RunPanel, stop: gr.Button, resume: gr.Button,
                page: gr.Blocks, pause: gr.Button) -> None:
    def refresh(run_id: str, shown: list[Any] | None, request: gr.Request) -> list[Any]:
        every_s = services.refreshes.interval(request.session_hash or "")
        view = view_for(services.watchers, services.runs_dir, run_id)
        if view is None:
            return [gr.skip()] * (len(panel.outputs) + 4) + [shown]
        active = view.state.active
        resumable = view.state in (RunState.STOPPED, RunState.FAILED) and view.status.get("method") in METHOD_NAMES
        training = view.status.get("method") in METHOD_NAMES
        pausing = training and view.state in (RunState.RUNNING, RunState.PAUSED) and str(view.state)
        pairs = [(key, lambda value=value: value) for key, value in render(view)] + [
            (active, lambda: gr.Button(visible=active)), (resumable, lambda: gr.Button(visible=resumable)),
            (pausing, lambda: gr.Button("Continue" if pausing == RunState.PAUSED else "Pause", visible=bool(pausing))),
            (every_s, lambda: gr.Timer(every_s))]  # built only for the page that is sent them
        keys = [(run_id, key) for key, _ in pairs]
        old = shown if shown and len(shown) == len(keys) else [None] * len(keys)
        return [make() if key != before else gr.skip() for (_, make), key, before in zip(pairs, keys, old)] + [keys]

    def on_load(run_id: str) -> str:
        """The training run this browser viewed last; else the one going on now; else the newest. Generation jobs
        are left out: their images are on the Generate tab, and a reload must not trade the run for one."""
        view = view_for(services.watchers, services.runs_dir, run_id)
        if view is not None and not is_generation_job(view):
            return run_id
        runs = [r for r in list_runs(services.runs_dir) if r.method in METHOD_NAMES]  # newest first
        shown = next((r for r in runs if r.state.active), runs[0] if runs else None)
        return shown.run_id if shown else run_id

    def stop_run(run_id: str) -> None:
        if run_id:
            services.jobs.stop(services.runs_dir / run_id)
            gr.Info("Asked the trainer to save and stop.")

    def pause_or_continue(run_id: str) -> None:
        """Pause a training run, or let a paused one continue (the button's label says which, by the run's state)."""
        if not run_id:
            return
        if services.jobs.pause(services.runs_dir / run_id):
            gr.Info("The run pauses after this step, its model kept loaded: Continue goes on, Stop saves and stops.")
        elif services.jobs.continue_(services.runs_dir / run_id):
            gr.Info("The run goes on.")

    def resume_run(run_id: str) -> Any:
        started, message = _resume(services, run_id)
        (gr.Info if started else gr.Warning)(message)
        return started or gr.update()

    shown = gr.State(None)  # change keys of what this browser tab shows now
    timer = gr.Timer(1.0)  # each refresh answers with the interval to the next (gui/refresh_budget.py)
    outputs = panel.outputs + [stop, resume, pause, timer, shown]
    # Outside the queue: one POST answered with the outputs, not a queue join and an answer on the event stream
    # (half of Gradio's CPU for a refresh); the refresh is quick, reads only the shared watchers and needs no slot.
    # (Gradio's timer ticks only while its page is visible: a background tab does not refresh, and after
    # refresh_budget.SEEN_FOR_S it no longer counts toward the other pages' budget.)
    timer.tick(refresh, inputs=[viewed, shown], outputs=outputs, show_progress="hidden", queue=False)
    page.load(on_load, inputs=viewed, outputs=viewed).then(refresh, inputs=[viewed, shown], outputs=outputs)
    stop.click(stop_run, inputs=viewed)
    resume.click(resume_run, inputs=viewed, outputs=viewed)
    pause.click(pause_or_continue, inputs=viewed)


def _resume(services: Services, run_id: str) -> tuple[str | None, str]:
    """(the new run's id or None, what to tell the user) for resuming run `run_id` from its newest state."""
    if not run_id:
        return None, "Pick a stopped or failed run first."
    try:
        started = services.jobs.resume(services.runs_dir / run_id)
    except JobError as err:
        return None, f"Not resumed: {plain(err)}"
    return started.name, f"Resumed {run_id} as {started.name}"


def opening_preset(presets: Presets, method: str, initial: str | None, first: bool) -> str | None:
    """The preset a method tab opens with: the first tab (LoRA) the initial one; another tab the initial one's
    variant for its method where one is built in (with --demo the ControlNet tab opens on demo_controlnet)."""
    if initial is None or first:
        return initial
    variant = f"{initial}_{method}"
    return variant if variant in presets.names(method) else None


def _opening(presets: Presets, method: str, name: str | None) -> tuple[dict[str, Any] | None, str]:
    """(the values a tab's widgets are built with, its report's opening text) for opening preset `name`."""
    if not name:
        return None, ""
    try:
        values, warnings = presets.load(name, method)
    except PresetError as err:
        return None, f"### Preset not loaded\n{plain(err)}"
    return values, f"### Loaded preset {label(name)}\n" + "\n".join(f"- {plain(w)}" for w in warnings)


def _method_tab(method: str, services: Services, viewed: gr.BrowserState, initial_preset: str | None,
                page: gr.Blocks) -> MethodTab:
    presets = services.presets
    with gr.Accordion("Presets", open=True):
        with gr.Row():
            preset = gr.Dropdown(presets.choices(method), label="Preset", value=None, scale=3,
                                 elem_id=f"preset-{method}")
            save_name = gr.Textbox(label="Save current settings as", placeholder="my preset", scale=3)
        with gr.Row():
            load = gr.Button("Load preset", size="sm", elem_id=f"load-preset-{method}")
            delete = gr.Button("Delete preset", size="sm")
            save = gr.Button("Save as preset", size="sm")
    with gr.Row():
        validate_btn = gr.Button("Validate", elem_id=f"validate-{method}")
        start = gr.Button("Start", variant="primary", elem_id=f"start-{method}")
    with gr.Row():
        show_cmd = gr.Button("Show command", size="sm")
        export = gr.Button("Export TOML", size="sm")
        upload = gr.UploadButton("Import config (TOML, kohya JSON)", file_types=[".toml", ".json"], size="sm",
                                 elem_id=f"import-{method}")
    report_md = gr.Markdown(elem_id=f"report-{method}")
    lr_chart = gr.LinePlot(pd.DataFrame({"step": [], "lr": [], "series": []}), x="step", y="lr", color="series",
                           title="Learning rate over the steps", height=220, visible=False, x_axis_format="d",
                           elem_id=f"lr-chart-{method}")
    command = gr.Code(language="shell", visible=False, label="Command")
    job_files = gr.File(visible=False, file_count="multiple", label="Cluster job files (SLURM, Kubernetes)")
    exported = gr.File(visible=False, label="Config")
    upload_box = build_upload(services.uploads, method)
    # The opening preset's values are the widgets' own: a page opens on them with no event (sending them at each
    # page load kept a fresh page busy for long on a loaded machine).
    opening_values, opened = _opening(presets, method, initial_preset)
    form = build_form(method, opening_values)
    upload_box.wire(form.widgets["train_data_dir"], report_md)
    inputs = set(form.components)
    notes = list(form.group_notes.values()) + list(form.accordions.values())

    def show_report(report: CheckReport) -> dict:
        grouped = report.by_group()
        updates: dict = {note: gr.Markdown("\n\n".join(grouped.get(group, [])), visible=group in grouped)
                         for group, note in form.group_notes.items()}
        updates.update({form.accordions[g]: gr.Accordion(open=True) for g in grouped if g in form.accordions})
        updates[report_md] = report.summary()
        return updates

    def with_chart(report: CheckReport) -> dict:
        """The report, and its learning-rate curve (hidden when there is none)."""
        rows = [(step, lr, series) for series, points in report.lr_curve.items() for step, lr in points]
        frame = pd.DataFrame(rows, columns=["step", "lr", "series"])
        return {**show_report(report), lr_chart: gr.LinePlot(frame, visible=bool(rows))}

    def on_validate(data: dict) -> dict:
        return with_chart(check_start(method, form.values(data), services.allowed_roots, services.demo))

    def on_start(data: dict) -> dict:
        report = check_start(method, form.values(data), services.allowed_roots, services.demo)
        updates = with_chart(report)
        if not report.ok:
            return updates
        try:
            if services.queue is not None:
                run_dir, said = services.queue.submit(report.cfg)
            else:
                run_dir, said = services.jobs.start(report.cfg), ""
        except JobError as err:
            updates[report_md] = f"### Not started\n{plain(err)}"
            return updates
        updates[viewed] = run_dir.name
        updates[report_md] = f"### {said or f'Started `{run_dir.name}`'}\n{report.steps}"
        return updates

    def on_command(data: dict) -> dict:
        report = check_form(method, form.values(data), services.allowed_roots)
        if report.cfg is None:
            return show_report(report)
        cfg = report.cfg
        panel = machines_panel(cfg, *services.jobs.written_command(cfg))
        return {command: gr.Code(panel.text, visible=True), job_files: gr.File(panel.files, visible=True)}

    def on_export(data: dict) -> dict:
        report = check_form(method, form.values(data), services.allowed_roots)
        if report.cfg is None:
            return show_report(report)
        path = Path(tempfile.mkdtemp(prefix="atelier-export-")) / f"{report.cfg.output_name or method}.toml"
        report.cfg.save(path)
        return {exported: gr.File(str(path), visible=True)}

    def on_load_preset(name: str) -> dict:
        if not name:
            return {report_md: "Pick a preset first."}
        try:
            values, warnings = presets.load(name, method)
        except PresetError as err:
            return {report_md: f"### Preset not loaded\n{plain(err)}"}
        updates = form.updates(values)
        updates[report_md] = f"### Loaded preset {label(name)}\n" + "\n".join(f"- {plain(w)}" for w in warnings)
        return updates

    def on_save_preset(data: dict) -> dict:
        typed = str(data[save_name] or "").strip()
        try:
            saved = presets.save(typed, method, form.values(data))
        except PresetError as err:
            return {report_md: f"### Not saved\n{plain(err)}"}
        shown = label(saved)
        renamed = "" if shown == typed else (f" (as `{shown}`: a preset name keeps letters, digits, spaces, - and _ "
                                            "only)")
        return {preset: gr.Dropdown(choices=presets.choices(method), value=saved),
                report_md: f"Saved preset `{shown}`{renamed}."}

    def on_delete_preset(name: str) -> dict:
        try:
            presets.delete(name or "")
        except PresetError as err:
            return {report_md: f"### Not deleted\n{plain(err)}"}
        return {preset: gr.Dropdown(choices=presets.choices(method), value=None),
                report_md: f"Deleted `{label(name)}`."}

    form_out = set(form.components) | {report_md}
    validate_btn.click(on_validate, inputs=inputs, outputs=set(notes) | {report_md, lr_chart})
    start.click(on_start, inputs=inputs, outputs=set(notes) | {report_md, viewed, lr_chart})
    show_cmd.click(on_command, inputs=inputs, outputs=set(notes) | {report_md, command, job_files})
    export.click(on_export, inputs=inputs, outputs=set(notes) | {report_md, exported})
    load.click(on_load_preset, inputs=preset, outputs=form_out)
    save.click(on_save_preset, inputs={save_name} | inputs, outputs={preset, report_md})
    delete.click(on_delete_preset, inputs=preset, outputs={preset, report_md})
    _keep_launch_consistent(form)
    # Presets are read from disk on every page load: one saved in another tab or browser is listed after a reload.
    # Its report says which preset it opened on with that same event: "Loaded preset" tells the page has loaded.
    page.load(lambda: {preset: gr.Dropdown(choices=presets.choices(method), value=initial_preset),
                       report_md: opened or gr.skip()}, outputs={preset, report_md})
    return MethodTab(form, report_md, upload)


@dataclass
class MethodTab:
    form: Form
    report: gr.Markdown
    import_button: gr.UploadButton


def _keep_launch_consistent(form: "Form") -> None:
    """Listing GPUs sets the process count to match (one process per GPU)."""
    gpu_ids, processes = form.widgets["gpu_ids"], form.widgets["num_processes"]

    def sync(ids: str) -> Any:
        listed = [i for i in str(ids).replace(" ", "").split(",") if i]
        return len(listed) if listed and all(i.isdigit() for i in listed) else gr.update()

    gpu_ids.change(sync, inputs=gpu_ids, outputs=processes)


class RunList:
    """list_runs for every page at most every `ttl_s` seconds (each call reads every run's status.json)."""

    def __init__(self, ttl_s: float = 2.0) -> None:
        self.ttl_s = ttl_s
        self._cached: dict[Path, tuple[float, list]] = {}
        self._lock = threading.Lock()

    def get(self, runs_dir: Path, fresh: bool = False) -> list:
        with self._lock:
            at, runs = self._cached.get(runs_dir, (-1e9, []))
            if fresh or time.monotonic() - at > self.ttl_s:
                runs = list_runs(runs_dir)
                self._cached[runs_dir] = (time.monotonic(), runs)
            return runs


RUN_LIST = RunList()


RUN_COLUMNS = ("run", "state", "started", "duration", "loss", "health", "method", "output", "note")
CELL_CHARS = 100  # a longer cell (a note) is cut; run ids stay whole (at most 84 characters: see new_run_dir)


def run_row(run: RunSummary) -> list[str]:
    """One line of the Runs table: when it started and how long it took, its last loss, what it made or said."""
    took = run.duration_s()
    note = run.message or (f"resumed from {run.resumed_from}" if run.resumed_from else "")
    if run.message and run.resumed_from:
        note += f" (resumed from {run.resumed_from})"
    return [run.run_id, str(run.state), time.strftime("%Y-%m-%d %H:%M", time.localtime(run.started)),
            format_duration(took) if took is not None else "", f"{run.last_loss:.4f}" if run.last_loss else "",
            run.health, run.method, Path(run.output).name if run.output else "", note]


def _runs_tab(services: Services, viewed: gr.BrowserState) -> None:
    # Each column as wide as its content, on one line (the table scrolls sideways when narrower); a long note is cut
    # at CELL_CHARS (a click on it shows all of it, and the run panel shows the run's whole message).
    table = gr.Dataframe(headers=list(RUN_COLUMNS), interactive=False, wrap=False, max_chars=CELL_CHARS,
                         elem_id="runs-table")
    gr.Markdown("Click a row to show that run in the panel.")
    with gr.Row():
        pick = gr.Dropdown(label="Open run", choices=[], scale=3, elem_id="runs-pick")
        open_btn = gr.Button("Show in run panel", scale=1)
        resume_btn = gr.Button("Resume", scale=1, elem_id="runs-resume")
        refresh = gr.Button("Refresh", scale=1)
    with gr.Row(visible=services.queue is not None):
        sooner = gr.Button("Queue: move up", size="sm", elem_id="queue-up")
        later = gr.Button("Queue: move down", size="sm", elem_id="queue-down")
        cancel = gr.Button("Queue: cancel", size="sm", variant="stop", elem_id="queue-cancel")
    note = gr.Markdown(elem_id="runs-note")

    def rows(shown: Any = None) -> tuple[Any, Any, Any]:
        runs = RUN_LIST.get(services.runs_dir, fresh=shown is None)
        data = [run_row(r) for r in runs]
        if data == shown:  # unchanged: nothing goes to the browser
            return gr.skip(), gr.skip(), shown
        return data, gr.Dropdown(choices=[r.run_id for r in runs]), data

    listed = gr.State(None)
    refresh.click(rows, outputs=[table, pick, listed])
    gr.Timer(5.0).tick(rows, inputs=listed, outputs=[table, pick, listed], show_progress="hidden")
    open_btn.click(lambda run_id: run_id or gr.update(), inputs=pick, outputs=viewed)

    def on_row(event: gr.SelectData) -> tuple[Any, Any]:
        run_id = str((event.row_value or [""])[0])  # the run column of the clicked row
        return (run_id, run_id) if run_id else (gr.skip(), gr.skip())

    table.select(on_row, outputs=[viewed, pick])

    def resume(run_id: str) -> tuple[Any, str]:
        """A new run from the picked (stopped or failed) run's config, from its newest training state."""
        started, message = _resume(services, run_id)
        return started or gr.update(), message

    resume_btn.click(resume, inputs=pick, outputs=[viewed, note])

    def queue_action(run_id: str, action: str) -> tuple[Any, Any, Any, str]:
        if services.queue is None or not run_id:
            return gr.skip(), gr.skip(), gr.skip(), "Pick a queued run first."
        try:
            if action == "cancel":
                services.queue.cancel(services.runs_dir / run_id)
            else:
                services.queue.move(services.runs_dir / run_id, -1 if action == "up" else 1)
        except JobError as err:
            return gr.skip(), gr.skip(), gr.skip(), plain(err)
        order = [p.name for p in services.queue.queued()]
        return *rows(), f"Queue: {', '.join(order) or 'empty'}"

    for button, action in ((sooner, "up"), (later, "down"), (cancel, "cancel")):
        button.click(lambda run_id, action=action: queue_action(run_id, action), inputs=pick,
                     outputs=[table, pick, listed, note])
