"""The live run panel: progress, rates, loss chart, samples, log tail, result or failure."""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import gradio as gr
import pandas as pd

from gui.jobs import devices_text, gpu_set
from gui.run_files import RunView, Watchers, format_duration
from gui.scores_view import scores_chart, scores_text
from gui.text import plain
from trainers.caption.options import JOB_METHOD as DATASET_METHOD
from trainers.core.events import Health
from trainers.core.registry import METHOD_NAMES
from trainers.core.rundir import RunState
from trainers.tools.options import JOB_METHOD as TOOLS_METHOD

OOM_HINT = ("Out of memory: lower train_batch_size or resolution, turn on gradient_checkpointing, use "
            "mixed_precision bf16/fp16, an 8-bit optimizer (AdamW8bit), or a smaller network_dim.")
SCROLL_LOG_TO_END = """() => { setTimeout(() => { const t = document.querySelector('#run-log textarea');
  if (t) { t.scrollTop = t.scrollHeight; } }, 100); }"""
STATE_LABEL = {RunState.QUEUED: "Queued", RunState.STARTING: "Starting", RunState.RUNNING: "Training",
               RunState.PAUSED: "Paused", RunState.STOPPING: "Stopping…",
               RunState.FINISHED: "Finished", RunState.FAILED: "Failed", RunState.STOPPED: "Stopped"}


@dataclass
class RunPanel:
    title: gr.Markdown
    progress: gr.HTML
    stats: gr.Markdown
    chart: gr.LinePlot
    lr_chart: gr.LinePlot
    gallery: gr.Gallery
    result: gr.Markdown
    log: gr.Textbox
    compare: gr.Button  # "Compare saves" of a finished run (wired to the Generate tab by the page)
    scores_chart: gr.LinePlot  # a scored run's fidelity and likeness over its samplings (gui/scores_view.py)

    @property
    def outputs(self) -> list[gr.components.Component]:
        return [self.title, self.progress, self.stats, self.chart, self.lr_chart, self.gallery, self.result, self.log,
                self.compare, self.scores_chart]


def build_run_panel() -> RunPanel:
    title = gr.Markdown("### No run yet\nPick a preset, press **Validate**, then **Start**.", elem_id="run-title")
    progress = gr.HTML(_bar(0, 0), elem_id="run-progress")
    stats = gr.Markdown(elem_id="run-stats")
    chart = gr.LinePlot(pd.DataFrame({"step": [], "loss": [], "series": []}), x="step", y="loss", color="series",
                        title="Loss", height=220, visible=False, elem_id="run-chart")
    lr_chart = gr.LinePlot(pd.DataFrame({"step": [], "lr": [], "series": []}), x="step", y="lr", color="series",
                           title="Learning rate", height=180, visible=False, elem_id="run-lr-chart")
    scores_chart = gr.LinePlot(pd.DataFrame({"step": [], "score": [], "series": []}), x="step", y="score",
                               color="series", title="Scores", height=180, visible=False, elem_id="run-scores-chart")
    # As tall as its rows of thumbnails (a fixed height cropped the second row); columns fit the width (page CSS).
    gallery = gr.Gallery(label="Samples", height="auto", visible=False, elem_id="run-gallery")
    result = gr.Markdown(elem_id="run-result")
    compare = gr.Button("Compare saves", size="sm", visible=False, elem_id="run-compare")
    with gr.Accordion("Log", open=False) as log_box:
        log = gr.Textbox(lines=14, max_lines=14, autoscroll=True, show_label=False, elem_id="run-log")
    log_box.expand(None, js=SCROLL_LOG_TO_END)  # opened: show the newest lines, not the first
    return RunPanel(title, progress, stats, chart, lr_chart, gallery, result, log, compare, scores_chart)


def _bar(step: int, total: int, unit: str = "steps") -> str:
    pct = 100 * step / total if total else 0
    return (f'<div class="atelier-bar"><div class="atelier-fill" style="width:{pct:.1f}%"></div>'
            f'<span>{step} / {total} {unit}</span></div>')


_RENDERED: dict[str, tuple[RunView, int, list[tuple[Any, Any]]]] = {}  # run id -> (view, its version, render)


def render(view: RunView) -> list[tuple[Any, Any]]:
    """(change key, panel value) for one run view, in RunPanel.outputs order.

    The page sends a value only when its key changed since the last tick, so an idle panel
    costs the browser nothing (re-drawing the chart every second is not free). A view is rendered
    once per change, however many pages show it.
    """
    done = _RENDERED.get(view.run_id)
    if done is not None and done[0] is view and done[1] == view.version and view.version:
        return done[2]
    if len(_RENDERED) > 64:
        _RENDERED.clear()
        _CHARTS.clear()
    pairs = _steady_charts(view, _render(view), time.monotonic())
    _RENDERED[view.run_id] = (view, view.version, pairs)
    return pairs


CHART_EVERY_S = 5.0  # a running run's charts are redrawn at most this often; its text every tick
_CHARTS: dict[str, tuple[float, list[tuple[Any, Any]], tuple[bool, bool]]] = {}  # run id -> (when drawn, its two
# chart pairs, whether each was shown)


def charts_shown(view: RunView) -> tuple[bool, bool]:
    """Whether the loss chart and the learning rate chart are shown."""
    return len(view.losses) >= 3, bool(view.lr_planned) or len(view.losses) >= 3


def _steady_charts(view: RunView, pairs: list[tuple[Any, Any]], now: float) -> list[tuple[Any, Any]]:
    """The charts of a running run as last drawn while the only news is more steps, for CHART_EVERY_S: each chart
    sent is a new plot object that every page's session builds, stores and serializes (the costliest part of a
    tick with many pages). A chart that shows or hides, a validation point and a run that ended draw at once."""
    charts = pairs[3:5]
    drawn = _CHARTS.get(view.run_id)
    if drawn is not None and view.state.active and now - drawn[0] < CHART_EVERY_S:
        # a plot built in an event handler has no `visible` attribute (Gradio sets only what the page updates)
        if drawn[2] == charts_shown(view) and drawn[1][0][0][2] == charts[0][0][2]:  # and the same validation points
            return pairs[:3] + drawn[1] + pairs[5:]
    _CHARTS[view.run_id] = (now, charts, charts_shown(view))
    return pairs


def _render(view: RunView) -> list[tuple[Any, Any]]:
    p, plan = view.progress, view.plan
    step, total = (p.step, p.total_steps) if p else (0, plan.get("total_steps", 0))
    state = STATE_LABEL.get(view.state, str(view.state))
    title = f"### {state}: `{view.run_id}`"
    if p and view.state.active:
        stats = (f"Epoch **{p.epoch} / {p.total_epochs}** · **{p.it_per_s:.2f} it/s** · "
                 f"{p.images_per_s:.2f} images/s · ETA {format_duration(p.eta_s)} · "
                 f"loss {p.loss_smoothed:.4f} · LR {p.lr:.2e} · {memory_text(view)}")
        if view.validation:
            stats += f" · validation loss {view.validation[-1][1]:.4f}"
        if len(view.rank_step_s) > 1:
            stats += " · step time per process " + " / ".join(f"{t:.2f} s" for t in view.rank_step_s)
        activity = view.status.get("activity")
        if activity:  # a sample or save between steps (left out of the rates)
            stats = f"**{str(activity).capitalize()}…** · {stats}"
        if view.state == RunState.PAUSED:  # gui/live_render.py
            stats += " · try it in **Generate**: model source *the paused run*"
    elif p:  # a run that ended: what it reached, no live rates
        stats = f"Epoch **{p.epoch} / {p.total_epochs}** · final loss {p.loss_smoothed:.4f} · {memory_text(view)}"
        if view.validation:
            stats += f" · validation loss {view.validation[-1][1]:.4f}"
    elif view.state == RunState.QUEUED:
        why = str(view.status.get("message") or "").strip()  # e.g. a demo run: "waits for the demo model ..."
        stats = (f"Waiting in the queue for {devices_text(gpu_set(view.status))} ({plain(why) + '; ' if why else ''}"
                 "the Runs tab reorders or cancels it).")
    else:
        stats = "Loading the model and data…" if view.state.active else ""
    chart_key = (len(view.losses), view.losses[-1] if view.losses else None, len(view.validation))
    losses = thinned(view.losses)
    frame = pd.DataFrame(
        [(s, loss, "raw") for s, loss, _, _ in losses] + [(s, sm, "smoothed") for s, _, sm, _ in losses]
        + [(s, loss, "validation") for s, loss in view.validation], columns=["step", "loss", "series"])
    samples = [s for s in view.samples if Path(s).exists()][-12:]
    result, bar, log = result_text(view), _bar(step, total), "\n".join(view.log_tail)
    comparable = can_compare(view)
    if is_tool_job(view):  # the Tools tab shows it
        title, stats = f"### {state}: `{view.run_id}`", "A tool job: its report and files are on the **Tools** tab."
    elif view.status.get("method") == DATASET_METHOD:  # the Captions & masks tab shows it
        title, stats = f"### {state}: `{view.run_id}`", ("A caption or mask job: its progress and results are on the "
                                                          "**Captions & masks** tab.")
    elif is_generation_job(view):  # the Generate tab shows it
        shown = "Generating" if view.state == RunState.RUNNING else state
        title, stats = f"### {shown}: `{view.run_id}`", "A generation job: its images are on the **Generate** tab."
        bar = _bar(*view.images, unit="images")
    return [(title, title), (bar, bar), (stats, stats),
            (chart_key, gr.LinePlot(frame, visible=charts_shown(view)[0], x_axis_format="d",  # whole-step ticks
                                    x_lim=[0, max(10, view.losses[-1][0] if view.losses else 0)])),
            ((chart_key, bool(view.lr_planned)), _lr_plot(view, [0, max(10, total)])),
            (tuple(samples), gr.Gallery(value=samples, visible=bool(samples))), (result, result), (log, log),
            (comparable, gr.Button(visible=comparable)), scores_chart(view.scores)]


def memory_text(view: RunView) -> str:
    """The run's peak memory, and beside it the estimate Validate showed and the peak it compares with (status.json,
    written by trainers/train/memory_watch.py)."""
    p, status = view.progress, view.status
    text = f"peak memory {p.peak_mem_gb:.2f} GB ({p.peak_mem_kind})" if p else ""
    estimate, real = status.get("memory_estimate_gb"), status.get("memory_peak_gb")
    if isinstance(estimate, (int, float)):
        measured = (f"{real:.2f} GB measured ({status.get('memory_peak_kind', '')})"
                    if isinstance(real, (int, float)) else "")
        text += f" · model memory: {estimate:.2f} GB estimated" + (f", {measured}" if measured else "")
    return text


T = TypeVar("T")
CHART_POINTS = 500  # at most this many points a line: a chart 220 px tall shows no more, and every page is sent each


def thinned(points: Sequence[T], at_most: int = CHART_POINTS) -> Sequence[T]:
    """Every k-th of `points` so that at most `at_most` remain, the last one always kept (a 10,000-step run's loss
    chart was 20,000 rows, serialized for every open page at each redraw)."""
    if len(points) <= at_most:
        return points
    every = -(-len(points) // (at_most - 1))
    kept = list(points[::every])
    return kept + [points[-1]] if kept[-1] is not points[-1] else kept


def _lr_plot(view: RunView, steps_axis: list[int]) -> gr.LinePlot:
    """Over the whole run's steps: the planned schedule (one line per distinct rate) and the rate each step reported."""
    rows = [(s, lr, f"planned {name}") for name, points in view.lr_planned.items() for s, lr in thinned(points)]
    rows += [(s, lr, "reported") for s, _, _, lr in thinned(view.losses)]
    frame = pd.DataFrame(rows, columns=["step", "lr", "series"])
    return gr.LinePlot(frame, visible=charts_shown(view)[1], x_axis_format="d",
                       x_lim=steps_axis)


def is_generation_job(view: RunView) -> bool:
    """Not a training run (a generation or a tool job: neither has steps, losses or saves to compare)."""
    return view.status.get("method") not in METHOD_NAMES


def is_tool_job(view: RunView) -> bool:
    return view.status.get("method") == TOOLS_METHOD


def can_compare(view: RunView) -> bool:
    """A training run that ended with at least one save can have its saves compared."""
    return (view.state in (RunState.FINISHED, RunState.STOPPED) and bool(view.checkpoints or view.output)
            and not is_generation_job(view))


def result_text(view: RunView) -> str:
    lines = []
    if view.output:
        label = "Checkpoint saved when stopped" if view.state == RunState.STOPPED else "Saved"
        lines.append(f"**{label}:** `{view.output}`")
    earlier = [c for c in view.checkpoints if c != view.output]
    if earlier:
        saves = "\n".join(f"- `{c}`" for c in earlier[-8:])
        lines.append(f"**Checkpoints ({len(earlier)})**\n{saves}")
    if view.state == RunState.FAILED:
        error = view.error
        code = view.status.get("exit_code", error.exit_code if error else "?")
        message = (error.message if error else "") or view.status.get("message") or "see the log"
        lines.insert(0, f"**Failed** (exit code {code}): {plain(message)}")
        if error is not None and error.suggestions:  # the trainer knows what to change in this config
            lines.insert(1, "**What to change:**\n" + "\n".join(f"- {plain(t)}" for t in error.suggestions))
        else:
            hint = failure_hint(str(message) + "\n" + "\n".join(view.log_tail[-30:]))
            if hint:
                lines.insert(1, f"*Hint:* {hint}")
    if view.health is not None:
        lines.append(health_text(view.health))
    if view.scores:
        lines.append(scores_text(view.scores))
    if view.warnings:
        lines.append("**Warnings**\n" + "\n".join(f"- {plain(w)}" for w in view.warnings[-5:]))
    return "\n\n".join(lines)


HEALTH_DOC = "[docs/health.md](manual/docs/health.md)"


def health_text(health: Health) -> str:
    """The newest save's health check (docs/health.md says what each warning means)."""
    name = Path(health.path).name
    if not health.warnings:
        return f"**Health of `{name}`:** healthy (what is checked: {HEALTH_DOC})"
    count = len(health.warnings)
    found = "\n".join(f"- {plain(w)}" for w in health.warnings[:8])
    plural = "s" if count != 1 else ""
    return f"**Health of `{name}`: {count} warning{plural}** (what each means: {HEALTH_DOC})\n{found}"


def failure_hint(text: str) -> str:
    lowered = text.lower()
    if "out of memory" in lowered or "cuda oom" in lowered:
        return OOM_HINT
    if "no such file" in lowered or "not found" in lowered:
        return "A file or folder is missing: check the paths named above (model, train_data_dir, network_weights)."
    if "system memory" in lowered:
        return "The machine ran out of RAM: use fewer data-loader workers, a smaller batch, or close other programs."
    return ""


def view_for(watchers: Watchers, runs_dir: Path, run_id: str) -> RunView | None:
    if not run_id or "/" in run_id or run_id.startswith("."):
        return None
    run_dir = runs_dir / run_id
    return watchers.view(run_dir) if run_dir.is_dir() else None
