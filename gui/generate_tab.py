"""The Generate tab: a form generated from the generation options, Generate / Compare buttons, a live gallery.

Like training, the page only writes a config and launches `python -m trainers generate` (gui/jobs.py), or asks a
paused training run to render with its live weights (gui/live_render.py);
everything shown comes from the job folder's events.jsonl, tailed with a byte cursor, so a reload or
a second browser sees the same job. No torch here.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr
from gradio.context import get_render_context

from gui.allowed_paths import TypedPath, option_paths, paths_outside
from gui.forms import from_widget, make_widget, to_widget
from gui.job_status import TITLES, ActiveJob, job_panel, job_status_text, start_checked
from gui.live_render import build_live_source, wire_live_source
from gui.presets import PresetError, Presets
from gui.run_files import Watchers, format_duration, list_runs
from gui.text import plain
from trainers.core import events as ev
from trainers.core.lifecycle import settled_state
from trainers.core.options.schema import ConfigError, ConfigIssue, Option
from trainers.core.registry import METHOD_NAMES
from trainers.core.rundir import RunState, read_status
from trainers.core.saves import list_saves
from trainers.generate.options import (
    GEN_BY_NAME,
    GEN_GROUPS,
    GEN_OPTIONS,
    MODES,
    GenerateConfig,
    check_config,
    config_from_values,
    declared_size,
    parse_loras,
)
from trainers.generate.saves import compare_form_values, find_saves, is_lora_file
from trainers.generate.video import CLIP_SUFFIX, is_video_model

ESSENTIALS = ("model", "loras", "prompts")
DEMO_PRESET = "demo"  # what `app.py --demo` fills the tab from
OPEN_GROUPS = ("render",)
HIDDEN = ("mode", "random_init")  # set by the button pressed; benchmarks only
GALLERY_MAX = 60


# ---- reading a job folder ---------------------------------------------------------------------------------

@dataclass
class JobView:
    job_id: str
    state: RunState = RunState.UNKNOWN
    mode: str = "generate"
    total: int = 0
    progress: ev.GenerateProgress | None = None
    images: dict[int, tuple[str, str]] = field(default_factory=dict)  # order -> (path, caption)
    warnings: list[str] = field(default_factory=list)
    error: str = ""
    grid: str = ""
    out_dir: str = ""
    status: dict[str, Any] = field(default_factory=dict)


class JobWatcher:
    """Follows one job folder; `refresh()` reads only what was appended to events.jsonl since last time."""

    def __init__(self, job_dir: Path) -> None:
        self.job_dir = job_dir
        self.events = ev.EventReader(job_dir, ev.JOB_EVENTS)
        self.view = JobView(job_dir.name)
        self._lock = threading.Lock()

    def refresh(self) -> JobView:
        with self._lock:
            for event in self.events.read_new():
                self._apply(event)
            v = self.view
            v.status = read_status(self.job_dir)
            v.state = settled_state(self.job_dir, v.status)
            v.mode = v.status.get("method", v.mode)
            if not v.error and v.state == RunState.FAILED:
                v.error = v.status.get("message") or "the job ended without reporting; see train.log in its folder"
            return v

    def _apply(self, event: ev.Event) -> None:
        v = self.view
        if isinstance(event, ev.JobStart):
            v.total, v.mode, v.out_dir = event.total_images, event.mode, event.out_dir
        elif isinstance(event, ev.Image):
            label = f"{event.label} · " if event.label else ""
            v.images[event.order] = (event.path, f"{label}{event.prompt[:60]} · seed {event.seed}")
        elif isinstance(event, ev.GenerateProgress):
            v.progress = event
        elif isinstance(event, ev.Warning):
            v.warnings.append(event.message)
        elif isinstance(event, ev.Error):
            v.error = event.message
        elif isinstance(event, ev.Grid):
            v.grid = event.copy or event.path


WATCHERS = Watchers(JobWatcher)  # one per job folder, shared by every browser session
GENERATE_TITLES = {**TITLES, RunState.RUNNING: "Generating"}


def made_kind(v: JobView) -> str:
    """What the job makes: a video family's clips (its files are .mp4, known by the first one shown, which comes
    before any progress), else images."""
    return "clips" if any(path.lower().endswith(CLIP_SUFFIX) for path, _ in v.images.values()) else "images"


def status_text(v: JobView) -> str:
    p = v.progress
    line = None
    if p:
        kind = made_kind(v)
        rate = f" · **{p.images_per_s:.2f} {kind}/s**" if v.state.active else ""
        eta = f" · ETA {format_duration(p.eta_s)}" if v.state.active else ""
        line = f"**{p.done} / {p.total or v.total}** {kind}{rate}{eta} · in `{v.out_dir}`"
    text = job_status_text(v, f"`{v.job_id}`", line, before="Loading the model…", titles=GENERATE_TITLES,
                           error=v.error)
    return text + (f"\n\nGrid saved: `{v.grid}`" if v.grid else "")


# ---- the tab ----------------------------------------------------------------------------------------------

@dataclass
class GenerateTab:
    widgets: dict[str, gr.components.Component]
    compare_group: gr.Accordion
    status: gr.Markdown

    def prefill(self, run_dir: Path) -> dict[gr.components.Component, Any]:
        """Updates that fill the compare form with a finished run's model, saves and sample prompts."""
        values = compare_form_values(run_dir)
        updates: dict[gr.components.Component, Any] = {
            self.widgets[n]: to_widget(GEN_BY_NAME[n], v) for n, v in values.items() if n in self.widgets}
        saves = find_saves(run_dir)
        updates[self.widgets["compare_run"]] = gr.Dropdown(choices=_run_choices(extra=str(run_dir)),
                                                           value=str(run_dir))
        updates[self.compare_group] = gr.Accordion(open=True)
        updates[self.status] = (f"### Compare `{run_dir.name}`\n{len(saves)} saves: "
                                f"{', '.join(s.label for s in saves)}. Check the prompts, then press "
                                "**Render compare grid**.")
        return updates


def _run_choices(runs_dir: Path | None = None, extra: str = "") -> list[tuple[str, str]]:
    choices = [(r.run_id, str(r.path)) for r in list_runs(runs_dir)
               if r.method in METHOD_NAMES and not r.state.active] if runs_dir else []
    if extra and extra not in [c[1] for c in choices]:
        choices.insert(0, (Path(extra).name, extra))
    return choices


ACTIVE = ActiveJob(methods=MODES)  # the generation job running now: generate or compare


def _size_text(cfg: GenerateConfig) -> str:
    """The size prompts without --w/--h render at, said before the job starts."""
    if cfg.width and cfg.height:
        return f"Images at {cfg.width}×{cfg.height} px (unless a prompt says --w/--h)."
    size = declared_size(cfg.model)
    own = f"{size}×{size} px, " if size else ""
    return f"Images at {own}the model's own size (unless width/height or a prompt's --w/--h say otherwise)."


def _servable(path: Path, runs_dir: Path) -> bool:
    """The page can show files under the runs folder only (the app's allowed path); others stay on disk."""
    try:
        return path.exists() and path.resolve().is_relative_to(runs_dir.resolve())
    except OSError:
        return False


def demo_values(presets: Presets) -> dict[str, Any]:
    """What the tab holds under `app.py --demo`, so that one click on Generate renders: the demo preset's model and
    sample prompts, and the newest LoRA a demo run saved (none before the first run)."""
    try:
        preset, _ = presets.load(DEMO_PRESET, "lora")
    except PresetError:
        return {}
    lora = newest_lora(Path(str(preset.get("output_dir") or "")), str(preset.get("output_name") or ""))
    return {"model": preset.get("pretrained_model_name_or_path") or "",
            "prompts": list(preset.get("sample_prompt_lines") or []), "loras": [lora] if lora else []}


def newest_lora(output_dir: Path, output_name: str) -> str:
    """The LoRA file of `output_name` saved last in `output_dir` (the final one after a whole run); "" for none."""
    files = [path for path, _ in list_saves(output_dir, output_name) if is_lora_file(path)] if output_name else []
    return str(max(files, key=lambda path: path.stat().st_mtime)) if files else ""


def _wire_demo_lora(widgets: dict[str, gr.components.Component], presets: Presets, filled: str) -> None:
    """Opening the tab puts in the newest demo LoRA (one trained since the page loaded) unless the LoRA field holds
    something else than what was put there."""
    tab = get_render_context()  # the Generate tab of the page, which this tab is built inside
    if not isinstance(tab, gr.Tab):
        return
    last = gr.State(filled)

    def on_open(current: str, put: str) -> tuple[Any, str]:
        newest = (demo_values(presets).get("loras") or [""])[0]
        if newest and current.strip() in ("", put) and newest != current.strip():
            return newest, newest
        return gr.skip(), put

    tab.select(on_open, inputs=[widgets["loras"], last], outputs=[widgets["loras"], last])


def _widget(opt: Option, runs_dir: Path) -> gr.components.Component:
    if opt.name == "compare_run":
        widget = gr.Dropdown(choices=_run_choices(runs_dir), value=None, allow_custom_value=True, label=opt.name,
                             info=opt.help)
    elif opt.name == "prompts":
        widget = gr.Textbox(lines=4, label=opt.name, info=opt.help, placeholder="a photo of a dog --n blurry --d 42")
    else:
        widget = make_widget(opt)
    widget.elem_id = f"gen-{opt.name}"
    return widget


def _outside_roots(cfg: GenerateConfig, roots: list[Path] | None) -> list[ConfigIssue]:
    """Paths typed into the page must lie under the allowed roots (symlinks resolved)."""
    typed = option_paths(GEN_OPTIONS, cfg.values, hub_options=["model"])
    for name in ("loras", "compare_loras"):
        try:
            typed += [TypedPath(name, ref.path, GEN_BY_NAME[name].group) for ref in parse_loras(cfg.values[name], name)]
        except ConfigError:
            pass  # check_config names the bad line
    return paths_outside(typed, roots)


def shows_frames(model: str, model_family: str, roots: list[Path] | None) -> bool:
    """The frames field is offered for a video family's model only (Wan, HunyuanVideo 1.5, LTX-2), told from
    model_family or the model's files; a path outside the allowed roots is not looked at."""
    values = {"model": model or "", "model_family": model_family or "auto"}
    if values["model_family"] == "auto" and _outside_roots(GenerateConfig(values), roots):
        return False
    return is_video_model(values["model"], values["model_family"])


def _wire_frames_field(widgets: dict[str, gr.components.Component], roots: list[Path] | None) -> None:
    sources = [widgets["model"], widgets["model_family"]]
    widgets["frames"].visible = shows_frames(*(str(w.value or "") for w in sources), roots)
    for source in sources:
        source.change(lambda model, family: gr.update(visible=shows_frames(model, family, roots)), inputs=sources,
                      outputs=widgets["frames"], show_progress="hidden")


def build_generate_tab(services: Any) -> GenerateTab:
    """Render the tab inside the current gradio context (call within `gr.Tab`)."""
    runs_dir: Path = services.runs_dir
    widgets: dict[str, gr.components.Component] = {}
    by_group: dict[str, list[Option]] = {}
    for opt in GEN_OPTIONS:
        if opt.name not in ESSENTIALS + HIDDEN:
            by_group.setdefault(opt.group, []).append(opt)
    demo = demo_values(services.presets) if getattr(services, "demo", None) is not None else {}
    live = build_live_source(runs_dir)  # or a paused run, rendering with its live weights
    with gr.Group():
        for name in ESSENTIALS:
            widgets[name] = _widget(GEN_BY_NAME[name], runs_dir)
            if name in demo:
                widgets[name].value = to_widget(GEN_BY_NAME[name], demo[name])
    if demo:
        _wire_demo_lora(widgets, services.presets, to_widget(GEN_BY_NAME["loras"], demo["loras"]))
    compare_group = None
    for group, title in GEN_GROUPS.items():
        members = by_group.get(group, [])
        if not members:
            continue
        with gr.Accordion(title, open=group in OPEN_GROUPS,
                          elem_id=f"gen-group-{group}") as accordion:
            if group == "compare":
                compare_group = accordion
                gr.Markdown("Render every save of a run (rows) against the prompts above (columns) with one "
                            "seed, into one labelled grid saved next to the run.")
            for start in range(0, len(members), 3):
                with gr.Row():
                    for opt in members[start:start + 3]:
                        widgets[opt.name] = _widget(opt, runs_dir)
            if group == "compare":
                compare_btn = gr.Button("Render compare grid", elem_id="gen-compare")
    _wire_frames_field(widgets, services.allowed_roots)
    panel = job_panel(services, ACTIVE, WATCHERS, name="generate", prefix="gen", before=[
        ("Generate", "gen-start", "primary")], hint="Fill in the model and prompts, then press **Generate**.")
    job, status, start = panel.job, panel.status, panel.buttons["gen-start"]
    gallery = gr.Gallery(label="Images", columns=4, height=420, elem_id="gen-gallery")
    grid = gr.Image(label="Compare grid", type="filepath", visible=False, interactive=False,
                    elem_id="gen-grid")
    assert compare_group is not None
    tab = GenerateTab(widgets, compare_group, status)
    inputs = set(widgets.values())

    def launch(data: dict, mode: str) -> dict:
        values = {n: from_widget(GEN_BY_NAME[n], data[w]) for n, w in widgets.items()}
        values = {n: "" if v is None and GEN_BY_NAME[n].kind == "str" else v for n, v in values.items()}
        size = ""

        def submit(cfg: GenerateConfig) -> Path:
            nonlocal size
            size = _size_text(cfg)
            return services.jobs.start_generate(cfg)

        job_dir, refused = start_checked(lambda: config_from_values({**values, "mode": mode}), lambda cfg: (
            _outside_roots(cfg, services.allowed_roots) or check_config(cfg)), submit)  # nothing outside is looked at
        if job_dir is None:
            return {status: refused}
        return {job: job_dir.name, status: f"### Started `{job_dir.name}`\n{size} Loading the model…",
                gallery: gr.Gallery(value=[]), grid: gr.Image(value=None, visible=mode == "compare")}

    def updates(job_id: str, v: JobView, _waits_for: str) -> list[tuple[Any, Any]]:
        images = [v.images[k] for k in sorted(v.images)][-GALLERY_MAX:]
        images = [(p, c) for p, c in images if _servable(Path(p), runs_dir)]
        grid_file = v.grid if v.grid and _servable(Path(v.grid), runs_dir) else None
        text = status_text(v)
        return [(text, text), (len(images), gr.Gallery(value=images)),
                (v.grid, gr.Image(value=grid_file, visible=bool(v.grid)))]

    outputs = {job, status, gallery, grid}
    start.click(lambda data: launch(data, "generate"), inputs=inputs, outputs=outputs)
    compare_btn.click(lambda data: launch(data, "compare"), inputs=inputs, outputs=outputs)
    panel.stoppable("Asked the job to stop: the images made so far are kept.")
    panel.watch([gallery, grid], updates)
    compare_run = widgets["compare_run"]
    compare_run.focus(lambda value: gr.Dropdown(choices=_run_choices(runs_dir, extra=value or "")),
                      inputs=compare_run, outputs=compare_run)
    wire_live_source(live, services, widgets, status, gallery)
    return tab


def wire_compare_button(button: gr.Button, viewed: Any, runs_dir: Path, tab: GenerateTab, tabs: gr.Tabs) -> None:
    """The run panel's "Compare saves": fill the compare form with the viewed run and show the Generate tab."""
    outputs = set(tab.widgets.values()) | {tab.compare_group, tab.status, tabs}

    def on_click(run_id: str) -> dict:
        run_dir = runs_dir / run_id if run_id and "/" not in run_id else None
        if run_dir is None or not run_dir.is_dir():
            return {tab.status: "Pick a finished run first."}
        return {**tab.prefill(run_dir), tabs: gr.Tabs(selected="generate")}

    button.click(on_click, inputs=viewed, outputs=outputs)
