"""The Captions & masks tab: caption a dataset folder (WD14 tagger or a vision-language model) or make loss masks for
it, as jobs: one form each, generated from the jobs' option declarations (trainers/caption/options.py,
trainers/caption/mask_options.py), and one status below with the progress in images/s, the newest captions or mask
previews, Stop, and Resume for a stopped or failed job (it does only the images not done yet).

Like the Tools tab, the page only writes a job's config and launches `python -m trainers caption|masks`
(gui/jobs.py); what it shows comes from the job folder's events.jsonl, tailed with a byte cursor. No torch here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr

from gui.allowed_paths import TypedPath, option_paths, paths_outside
from gui.dataset_tab import DatasetTab
from gui.forms import make_widget
from gui.job_status import ActiveJob, job_panel, job_status_text, start_checked
from gui.jobs import JobError, devices_text, gpu_set
from gui.run_files import Watchers, format_duration
from gui.text import plain
from gui.tools_tab import ToolView, ToolWatcher, form_values, option_form
from trainers.caption.events import CAPTION_EVENTS, ImageResult
from trainers.caption.mask_layout import is_dataset_toml, mask_folders
from trainers.caption.options import JOB_METHOD, VERBS, JobConfig, check_config, config_from_values, options_for
from trainers.core import events as ev
from trainers.core.options.schema import ConfigError, ConfigIssue, Option
from trainers.core.rundir import CONFIG, RunState, read_run_config
from trainers.dataset_edit.folders import DatasetEditError

SHOWN_RESULTS = 8
ENDED = (RunState.FINISHED, RunState.FAILED, RunState.STOPPED)  # wrote all it will: the Dataset tab reads it again
FORM_TITLES = {"caption": "Captions", "masks": "Masks"}


@dataclass
class CaptionView(ToolView):
    results: list[ImageResult] = field(default_factory=list)  # the newest last


class CaptionWatcher(ToolWatcher):
    """Follows one caption or mask job's folder."""

    def __init__(self, job_dir: Path) -> None:
        super().__init__(job_dir)
        self.events = ev.EventReader(job_dir, CAPTION_EVENTS)
        self.view = CaptionView(job_dir.name, mode=JOB_METHOD)  # type: ignore[assignment]

    def _apply(self, event: ev.Event) -> None:
        if isinstance(event, ImageResult):
            results = self.view.results  # type: ignore[attr-defined]
            results.append(event)
            del results[:-SHOWN_RESULTS]
        else:
            super()._apply(event)


WATCHERS = Watchers(CaptionWatcher)
ACTIVE = ActiveJob(methods=(JOB_METHOD,))


def status_text(v: CaptionView, waits_for: str = "") -> str:
    """What the tab says of the job; `waits_for`: what a queued job waits behind (RunQueue.waits_for)."""
    verb = v.status.get("verb", "")
    queued = []
    if v.state == RunState.QUEUED:
        behind = f"queued behind {waits_for}" if waits_for else "queued: it starts within seconds"
        queued.append(f"Waiting for {devices_text(gpu_set(v.status))}, {behind}. It starts by itself when the device "
                      "is free; **Stop** takes it out of the queue.")
    p = v.progress
    line = None
    if p is not None and p.stage in VERBS:
        rate = f" · **{p.images_per_s:.2f} images/s**" if getattr(p, "images_per_s", None) else ""
        eta = f" · ETA {format_duration(p.eta_s)}" if p.eta_s is not None and v.state.active else ""
        extra = [f"{n} {what}" for n, what in ((getattr(p, "skipped", 0), "skipped (already done)"),
                                               (getattr(p, "unreadable", 0), "unreadable")) if n]
        line = f"**{p.done} / {p.total}** images{rate}{eta}" + (f" · {', '.join(extra)}" if extra else "")
    elif p is not None and v.state.active:  # the model's download
        line = f"{p.stage.capitalize()}: {p.done} / {p.total}"
    resume = ["**Resume** does the images this job did not finish."] if v.state in (RunState.STOPPED,
                                                                                      RunState.FAILED) else []
    return job_status_text(v, f"{verb} `{v.job_id}`", line, before="Loading the model…", notes=resume, extra=queued)


def results_text(v: CaptionView) -> str:
    captions = [r for r in v.results if r.caption is not None]
    if not captions:
        return ""
    rows = "\n".join(f"| `{Path(r.image).name}` | {plain(r.caption).replace('|', '/')} |" for r in captions[::-1])
    return f"**Newest captions**\n\n| image | caption |\n|---|---|\n{rows}"


def _outside_roots(cfg: JobConfig, roots: list[Path] | None) -> list[ConfigIssue]:
    """Paths typed into the page, and the folders a dataset .toml given as a mask job's images names (its masks are
    written there), must lie under the allowed roots."""
    refused = paths_outside(option_paths(cfg.options, cfg.values, hub_options=["model"]), roots)
    if refused or cfg.verb != "masks" or roots is None or not is_dataset_toml(cfg.images):
        return refused
    try:
        named = [TypedPath("images", str(path), "input") for folder in mask_folders(cfg)
                 for path in (folder.images, folder.masks)]
    except DatasetEditError:
        return []  # check_config names the problem
    return paths_outside(named, roots)


def _widget(verb: str, opt: Option) -> gr.components.Component:
    widget = make_widget(opt)
    widget.elem_id = f"{verb}-{opt.name}"
    return widget


def resume_values(job_dir: Path) -> dict[str, Any]:
    """A stopped or failed job's options, to run again over what it did not finish."""
    saved = read_run_config(job_dir) or {}
    verb = saved.pop("verb", "")
    if verb not in VERBS:
        raise JobError(f"{job_dir.name} has no readable {CONFIG} of a caption or mask job to resume.")
    from trainers.caption.options import load_job_config

    cfg = load_job_config(verb, job_dir / CONFIG)
    return {"verb": verb, **cfg.values, "resume": str(job_dir)}


def build_caption_tab(services: Any, dataset: DatasetTab | None = None) -> None:
    """Render the tab inside the current gradio context (call within `gr.Tab`); a job that ends shows `dataset`'s
    open dataset again (its new captions and masks)."""
    runs_dir: Path = services.runs_dir
    forms: dict[str, tuple[dict[str, gr.components.Component], gr.Button]] = {}
    with gr.Tabs():
        for verb, what in VERBS.items():
            with gr.Tab(FORM_TITLES[verb], id=f"{verb}-form"):
                gr.Markdown(f"**{FORM_TITLES[verb]}:** {what}. Each file is written as soon as it is made; a stopped "
                            "job keeps them and Resume does the rest. See "
                            "[docs/captioning.md](manual/docs/captioning.md).")
                widgets = option_form(options_for(verb), lambda opt, verb=verb: _widget(verb, opt))
                forms[verb] = (widgets, gr.Button(f"Start {FORM_TITLES[verb].lower()}", variant="primary",
                                                  elem_id=f"{verb}-run"))
    panel = job_panel(services, ACTIVE, WATCHERS, name="caption", prefix="caption", after=[
        ("Resume", "caption-resume", "secondary")], hint="Fill in a form, then press **Start**.")
    job, status, resume = panel.job, panel.status, panel.buttons["caption-resume"]
    results = gr.Markdown(elem_id="caption-results")
    previews = gr.Gallery(label="Masks (red: left out of the loss)", visible=False, columns=4, height="auto",
                          elem_id="caption-previews")
    report = gr.Markdown(elem_id="caption-report")

    def start(values: dict[str, Any], verb: str) -> dict:
        said = ""

        def submit(cfg: JobConfig) -> Path:  # queued behind a run that holds the device, where the page has a queue
            nonlocal said
            if services.queue is None:
                job_dir = services.jobs.start_dataset_job(cfg)
                said = f"Started {verb} `{job_dir.name}`"
            else:
                job_dir, said = services.queue.submit_dataset_job(cfg)
            return job_dir

        job_dir, refused = start_checked(lambda: config_from_values(verb, values), lambda cfg: _outside_roots(
            cfg, services.allowed_roots) or check_config(cfg), submit)  # nothing outside the roots is looked at
        if job_dir is None:
            return {status: refused}
        return {job: job_dir.name, status: f"### {said}", report: "", results: "",
                previews: gr.Gallery(value=None, visible=False)}

    def launch(verb: str, widgets: dict[str, gr.components.Component], data: dict) -> dict:
        return start(form_values(options_for(verb), widgets, data), verb)

    def on_resume(job_id: str) -> dict:
        job_id, v = panel.shown(job_id)
        if not job_id:
            return {status: "No job to resume."}
        if v.state not in (RunState.STOPPED, RunState.FAILED):
            return {status: status_text(v) + f"\n\nOnly a stopped or failed job can be resumed; this one is {v.state}."}
        try:
            values = resume_values(runs_dir / job_id)
        except (JobError, ConfigError) as err:
            return {status: f"### Not resumed\n{plain(err)}"}
        return start(values, values.pop("verb"))

    reload = [dataset.reload] if dataset else []

    def updates(job_id: str, v: CaptionView, waits_for: str) -> list[tuple[Any, Any]]:
        shown_previews = [r.preview for r in v.results if r.preview and Path(r.preview).is_file()]
        text, results_shown = status_text(v, waits_for), results_text(v)
        report_text = f"## {plain(v.title)}\n\n{v.report}" if v.report else ""
        ended = f"{job_id} {v.state}" if v.state in ENDED else None  # the Dataset tab reads its dataset again
        return [(text, text), (results_shown, results_shown),
                (tuple(shown_previews), gr.Gallery(value=shown_previews[::-1] or None, visible=bool(shown_previews))),
                (report_text, report_text), *[(ended, ended or gr.skip()) for _ in reload]]

    for verb, (widgets, run) in forms.items():
        run.click(lambda data, verb=verb, widgets=widgets: launch(verb, widgets, data),
                  inputs=set(widgets.values()), outputs={job, status, report, results, previews})
    panel.stoppable("Asked the job to stop: the files it finished stay, Resume does the rest.", ended=status_text)
    resume.click(on_resume, inputs=job, outputs={job, status, report, results, previews})
    panel.watch([results, previews, report, *reload], updates)
