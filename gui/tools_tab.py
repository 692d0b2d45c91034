"""The Tools tab: a sub-tab per tool (inspect, resize, merge, extract, convert), each a form generated from the tools'
option declarations (trainers/tools/options.py) and a Run button; one status, report and list of output files below.

Like generation, the page only writes a job's config and launches `python -m trainers tools <verb>` (gui/jobs.py);
what it shows comes from the job folder's events.jsonl, tailed with a byte cursor, so a reload or a second browser
sees the same job. No torch here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import gradio as gr

from gui.allowed_paths import TypedPath, option_paths, paths_outside
from gui.forms import from_widget, make_widget
from gui.generate_tab import JobWatcher
from gui.job_status import ActiveJob, job_panel, job_status_text, start_checked
from gui.run_files import Watchers, format_duration
from gui.text import plain
from gui.transfers import DOWNLOADS, TransferError, download_zip
from trainers.core import events as ev
from trainers.core.job import JobOutput, JobProgress, JobReport
from trainers.core.options.schema import ConfigError, ConfigIssue, Option
from trainers.core.rundir import RunState, read_status
from trainers.generate.options import parse_loras
from trainers.tools.events import TOOL_EVENTS
from trainers.tools.options import JOB_METHOD, VERBS, ToolConfig, check_config, config_from_values, options_for


@dataclass
class ToolView:
    job_id: str
    state: RunState = RunState.UNKNOWN
    mode: str = JOB_METHOD
    status: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    progress: JobProgress | None = None
    title: str = ""
    report: str = ""
    outputs: list[tuple[str, str]] = field(default_factory=list)  # (path, kind)
    warnings: list[str] = field(default_factory=list)


class ToolWatcher(JobWatcher):
    """Follows one tool job's folder (a generation job's watcher reading the tools' events)."""

    def __init__(self, job_dir: Path) -> None:
        super().__init__(job_dir)
        self.events = ev.EventReader(job_dir, TOOL_EVENTS)
        self.view = ToolView(job_dir.name)  # type: ignore[assignment]

    def _apply(self, event: ev.Event) -> None:
        v: ToolView = self.view  # type: ignore[assignment]
        if isinstance(event, JobProgress):
            v.progress = event
        elif isinstance(event, JobReport):
            v.title, v.report = event.title, event.markdown
        elif isinstance(event, JobOutput):
            v.outputs.append((event.path, event.kind))
        elif isinstance(event, ev.Warning):
            v.warnings.append(event.message)
        elif isinstance(event, ev.Error):
            v.error = event.message


WATCHERS = Watchers(ToolWatcher)
ACTIVE = ActiveJob(methods=(JOB_METHOD,))


def status_text(v: ToolView, waits_for: str = "") -> str:
    verb = v.status.get("verb", "")
    queued = [f"It loads whole models, so it waits for {waits_for or 'its device'} to finish and starts by "
              "itself; **Stop** takes it out of the queue."] if v.state == RunState.QUEUED else []
    p = v.progress
    line = None
    if p is not None and v.state.active:
        eta = f" · ETA {format_duration(p.eta_s)}" if p.eta_s is not None else ""
        line = f"{p.stage.capitalize()}: **{p.done} / {p.total}**{eta}"
    return job_status_text(v, f"tools {verb} `{v.job_id}`", line, extra=queued)


def _servable(path: str, runs_dir: Path) -> bool:
    """Files under the runs folder (the app's allowed path) can be downloaded from the page; folders cannot."""
    try:
        found = Path(path)
        return found.is_file() and found.resolve().is_relative_to(runs_dir.resolve())
    except OSError:
        return False


def downloads(v: ToolView, job_dir: Path, runs_dir: Path) -> list[str]:
    """What the page offers of a job's outputs: its files (the report last), and each folder output (a diffusers
    model) as the zip Zip folders built of it."""
    zips = [str(_zip_of(job_dir, Path(p))) for p, kind in v.outputs if kind != "report" and Path(p).is_dir()]
    found = [p for p, kind in v.outputs if kind != "report"] + [z for z in zips if Path(z).is_file()]
    found += [p for p, kind in v.outputs if kind == "report"]
    return [p for p in found if _servable(p, runs_dir)]


def _zip_of(job_dir: Path, folder: Path) -> Path:
    return job_dir / DOWNLOADS / f"{folder.name}.zip"


def zip_folders(v: ToolView, job_dir: Path) -> list[Path]:
    """Zip each folder a job wrote (a merged or converted diffusers model) into its folder, as the run panel zips a
    run's model folder; TransferError when it wrote none."""
    folders = [Path(p) for p, kind in v.outputs if kind != "report" and Path(p).is_dir()]
    if not folders:
        raise TransferError("this job wrote no folder (its files download as they are)")
    return [download_zip(job_dir, [folder], _zip_of(job_dir, folder).name) for folder in folders]


def _outside_roots(cfg: ToolConfig, roots: list[Path] | None) -> list[ConfigIssue]:
    """Paths typed into the page must lie under the allowed roots (symlinks resolved)."""
    typed = option_paths(cfg.options, cfg.values)
    if "loras" in cfg.values:
        try:
            typed += [TypedPath("loras", ref.path, "input") for ref in parse_loras(cfg.loras)]
        except ConfigError:
            pass  # check_config names the bad line
    return paths_outside(typed, roots)


def _started(job_dir: Path) -> tuple[Path, str]:
    return job_dir, f"Started tools {read_status(job_dir).get('verb', '')} `{job_dir.name}`"


def _form(verb: str) -> dict[str, gr.components.Component]:
    return option_form(options_for(verb), lambda opt: _widget(verb, opt))


def option_form(options: tuple[Option, ...], widget: Callable[[Option], gr.components.Component]
                ) -> dict[str, gr.components.Component]:
    """A job's widgets (`widget(option)`), rendered in the current context three a row: the common options first,
    the advanced ones folded."""
    widgets: dict[str, gr.components.Component] = {}
    for group, members in (("", [o for o in options if not o.advanced]), ("More options",
                                                                           [o for o in options if o.advanced])):
        if not members:
            continue
        with gr.Accordion(group, open=False) if group else gr.Group():
            for start in range(0, len(members), 3):
                with gr.Row():
                    for opt in members[start:start + 3]:
                        widgets[opt.name] = widget(opt)
    return widgets


PLACEHOLDERS = {"any": "a file or a folder (a local path)", "out": "empty: into the job's folder"}


def _widget(verb: str, opt: Option) -> gr.components.Component:
    widget = make_widget(opt)
    widget.elem_id = f"tools-{verb}-{opt.name}"
    if opt.path in PLACEHOLDERS:  # the tools read local files only, and write a file or a folder
        widget.placeholder = PLACEHOLDERS[opt.path]
    return widget


def form_values(options: tuple[Option, ...], widgets: dict[str, gr.components.Component], data: dict
                ) -> dict[str, Any]:
    """A form's values as its options take them (an empty text field is "")."""
    by_name = {o.name: o for o in options}
    values = {n: from_widget(by_name[n], data[w]) for n, w in widgets.items()}
    return {n: "" if v is None and by_name[n].kind == "str" else v for n, v in values.items()}


def build_tools_tab(services: Any) -> None:
    """Render the tab inside the current gradio context (call within `gr.Tab`)."""
    runs_dir: Path = services.runs_dir
    forms: dict[str, tuple[dict[str, gr.components.Component], gr.Button]] = {}
    with gr.Tabs():
        for verb, what in VERBS.items():
            with gr.Tab(verb.capitalize(), id=f"tools-{verb}"):
                gr.Markdown(f"**{verb.capitalize()}:** {what}. Every output is written beside its final name and "
                            "renamed into place; the inputs are never changed. See "
                            "[docs/tools.md](manual/docs/tools.md).")
                widgets = _form(verb)
                forms[verb] = (widgets, gr.Button(f"Run {verb}", variant="primary", elem_id=f"tools-{verb}-run"))
    panel = job_panel(services, ACTIVE, WATCHERS, name="tools", prefix="tools",
                      hint="Fill in a tool's form, then press **Run**.")
    job, status = panel.job, panel.status
    report = gr.Markdown(elem_id="tools-report")
    zip_button = gr.Button("Download a folder output (zip)", size="sm", elem_id="tools-zip")
    files = gr.File(label="Outputs", file_count="multiple", interactive=False, visible=False, elem_id="tools-files")

    def launch(verb: str, widgets: dict[str, gr.components.Component], data: dict) -> dict:
        values = form_values(options_for(verb), widgets, data)
        said = ""

        def submit(cfg: ToolConfig) -> Path:  # a heavy job queues behind a run on its device, where there is a queue
            nonlocal said
            job_dir, said = (services.queue.submit_tool(cfg) if services.queue is not None
                             else _started(services.jobs.start_tool(cfg)))
            return job_dir

        job_dir, refused = start_checked(lambda: config_from_values(verb, values), lambda cfg: _outside_roots(
            cfg, services.allowed_roots) or check_config(cfg), submit)  # nothing outside is looked at
        cleared = {report: "", files: gr.File(value=None, visible=False)}  # never the previous job's report
        if job_dir is None:
            return {status: refused, **cleared}
        return {job: job_dir.name, status: f"### {said}", **cleared}

    def on_zip(job_id: str) -> Any:
        job_id, _ = ACTIVE.shown(runs_dir, job_id)
        if not job_id:
            gr.Warning("Run a tool first.")
            return gr.skip()
        v: ToolView = WATCHERS.view(runs_dir / job_id)
        try:
            zip_folders(v, runs_dir / job_id)
        except (TransferError, OSError) as err:
            gr.Warning(f"Nothing to zip: {plain(err)}")
            return gr.skip()
        shown = downloads(v, runs_dir / job_id, runs_dir)
        return gr.File(value=shown or None, visible=bool(shown))

    def updates(job_id: str, v: ToolView, waits_for: str) -> list[tuple[Any, Any]]:
        outputs = downloads(v, runs_dir / job_id, runs_dir)
        text = status_text(v, waits_for)
        report_text = f"## {plain(v.title)}\n\n{v.report}" if v.report else ""
        return [(text, text), (report_text, report_text),
                (tuple(outputs), gr.File(value=outputs or None, visible=bool(outputs)))]

    for verb, (widgets, run) in forms.items():
        run.click(lambda data, verb=verb, widgets=widgets: launch(verb, widgets, data),
                  inputs=set(widgets.values()), outputs={job, status, report, files})
    panel.stoppable("Asked the job to stop: nothing half-written is kept.")
    zip_button.click(on_zip, inputs=job, outputs=files)
    panel.watch([report, files], updates)
