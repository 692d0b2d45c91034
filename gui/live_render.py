"""The Generate tab's "paused run" source: a training run that is paused (status.json) renders the form's first
prompt with its live weights (trainers/train/live_render.py). Render writes the request into the run folder
(rundir.write_render_request) and the tab shows the image once the run's `live_render` event answers it, read from
the run's events as the run panel reads them (the page's shared run watchers). No torch here."""
from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from gui.forms import from_widget
from gui.run_files import list_runs
from gui.text import plain
from trainers.core import events as ev
from trainers.core.prompts import parse_prompt_lines
from trainers.core.registry import METHOD_NAMES
from trainers.core.render_request import SEED_MAX, RenderRequest, parse_render_request
from trainers.core.rundir import (
    CONTROL,
    RENDER_REQUEST,
    RunState,
    effective_state,
    read_status,
    write_render_request,
)
from trainers.generate.options import GEN_BY_NAME

FORM = ""  # the source value of the form's own model and LoRAs
FORM_LABEL = "the model and LoRAs below"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")  # what the gallery shows (a clip's path is said instead)
NOT_PAUSED = ("The run must be paused to render from its live weights: press **Pause** in its run panel, wait for "
              "*Paused*, then **Render** here.")


def paused_runs(runs_dir: Path) -> list[tuple[str, str]]:
    """(label, run id) of every training run paused now, newest first."""
    return [(f"the paused run {r.run_id}", r.run_id) for r in list_runs(runs_dir)
            if r.method in METHOD_NAMES and r.state == RunState.PAUSED]


def source_choices(runs_dir: Path, keep: str = "") -> list[tuple[str, str]]:
    """The model sources: the form's own model, then each paused run (`keep`, the one picked, stays listed)."""
    runs = paused_runs(runs_dir)
    if keep and keep not in [run_id for _, run_id in runs]:
        runs.append((f"the run {keep} (not paused now)", keep))
    return [(FORM_LABEL, FORM), *runs]


def request_from_form(values: dict[str, Any], multiplier: float | None, request_id: str) -> RenderRequest | str:
    """The request of the form's first prompt line (its --n/--w/--h/--s/--d/--l first, then the form's negative
    prompt, seed, size, steps and CFG; an unset size is the run's), or what is wrong with the form."""
    try:
        prompts = parse_prompt_lines(list(values.get("prompts") or []))
    except ValueError as err:
        return f"prompts: {err}"
    if not prompts:
        return "Write a prompt in **prompts** first (the first line is rendered)."
    first = prompts[0]
    seed = first.seed if first.seed is not None else values.get("seed")
    if seed == -1:
        seed = random.randint(0, SEED_MAX)
    data = {"id": request_id, "prompt": first.prompt, "negative": first.negative or values.get("negative_prompt") or "",
            "seed": seed, "width": first.width or values.get("width"), "height": first.height or values.get("height"),
            "steps": first.steps or values.get("steps"),
            "cfg_scale": first.cfg_scale if first.cfg_scale is not None else values.get("cfg_scale"),
            "multiplier": 1.0 if multiplier is None else multiplier}
    checked = parse_render_request({k: v for k, v in data.items() if v is not None})
    return checked if isinstance(checked, RenderRequest) else f"Not rendered: {checked}"


def ask(runs_dir: Path, run_id: str, values: dict[str, Any], multiplier: float | None) -> tuple[str, str]:
    """Write the render request of the form into the paused run `run_id`: (its id, what to say), or ("", why not)."""
    run_dir = runs_dir / run_id if run_id and "/" not in run_id and run_id not in (".", "..") else None
    if run_dir is None or not run_dir.is_dir():
        return "", "Pick a paused run as the **model source** first."
    if effective_state(read_status(run_dir)) != RunState.PAUSED:
        return "", NOT_PAUSED
    wanted = request_from_form(values, multiplier, uuid.uuid4().hex[:12])
    if isinstance(wanted, str):
        return "", wanted
    write_render_request(run_dir, wanted)
    return wanted.id, (f"### Rendering with `{run_id}`'s live weights\n`{plain(wanted.prompt[:80])}` at LoRA "
                       f"multiplier {wanted.multiplier:g}: the run renders it while paused…")


def unanswered(run_dir: Path, request_id: str, state: RunState) -> str:
    """Why the request `request_id` will not be answered (the run ended, or went on and left it untaken: it is taken
    back), or "" while it may still be."""
    if not state.active:
        return f"`{run_dir.name}` ended before it rendered the request."
    if state == RunState.PAUSED:
        return ""
    left = run_dir / CONTROL / RENDER_REQUEST
    try:
        mine = json.loads(left.read_text(encoding="utf-8")).get("id") == request_id
    except (OSError, ValueError, AttributeError):
        return ""  # taken: the run answers it
    if not mine:
        return ""
    left.unlink(missing_ok=True)
    return f"`{run_dir.name}` went on before it rendered the request: pause it again, then **Render**."


def answer_text(run_id: str, answer: ev.LiveRender) -> str:
    if answer.error:
        return f"### Not rendered by `{run_id}`\n{plain(answer.error)}"
    return (f"### Rendered by `{run_id}` at step {answer.step}\n`{plain(answer.prompt[:80])}` · seed {answer.seed} · "
            f"LoRA multiplier {answer.multiplier:g} · `{answer.path}`")


@dataclass
class LiveSource:
    source: gr.Dropdown
    multiplier: gr.Number
    render: gr.Button


def build_live_source(runs_dir: Path) -> LiveSource:
    """The source row, rendered in the current gradio context: the source dropdown, the LoRA multiplier, Render."""
    with gr.Row(equal_height=True):
        source = gr.Dropdown(choices=source_choices(runs_dir), value=FORM, label="model source (or a paused run)",
                             scale=3, elem_id="gen-source")
        multiplier = gr.Number(1.0, label="its LoRA multiplier", minimum=-10, maximum=10, step=0.1, scale=1,
                               elem_id="gen-live-multiplier")
        render = gr.Button("Render", scale=1, elem_id="gen-live-render")
    return LiveSource(source, multiplier, render)


def wire_live_source(live: LiveSource, services: Any, widgets: dict[str, gr.components.Component],
                     status: gr.Markdown, gallery: gr.Gallery) -> None:
    """Render writes the request; a timer, on while one is pending, shows its answer in the tab's `status` and the
    image in its `gallery` (the page's weight is near its limit: no components of its own for them)."""
    runs_dir: Path = services.runs_dir
    pending = gr.State(("", ""))  # (run id, request id) awaiting its answer
    timer = gr.Timer(1.0, active=False)
    inputs = set(widgets.values()) | {live.source, live.multiplier}

    def on_render(data: dict) -> dict:
        values = {n: from_widget(GEN_BY_NAME[n], data[w]) for n, w in widgets.items()}
        run_id = data[live.source] or ""
        request_id, text = ask(runs_dir, run_id, values, data[live.multiplier])
        if not request_id:
            return {status: text}
        return {status: text, pending: (run_id, request_id), timer: gr.Timer(active=True)}

    def on_tick(waiting: tuple[str, str]) -> dict:
        run_id, request_id = waiting or ("", "")
        if not request_id:
            return {timer: gr.Timer(active=False)}
        view = services.watchers.view(runs_dir / run_id)
        answer = view.live_renders.get(request_id)
        if answer is None:
            why = unanswered(runs_dir / run_id, request_id, view.state)
            if not why:
                return {}
            return {status: f"### Not rendered\n{why}", pending: ("", ""), timer: gr.Timer(active=False)}
        shown = answer.path if answer.path and _under(Path(answer.path), runs_dir) else None
        if shown and Path(shown).suffix.lower() not in IMAGE_SUFFIXES:  # a video family's clip: its path is said
            shown = None
        sent: dict[Any, Any] = {status: answer_text(run_id, answer), pending: ("", ""), timer: gr.Timer(active=False)}
        if shown:
            sent[gallery] = gr.Gallery(value=[(shown, f"{answer.prompt[:60]} · seed {answer.seed}")])
        return sent

    live.render.click(on_render, inputs=inputs, outputs={status, pending, timer})
    timer.tick(on_tick, inputs=pending, outputs={status, gallery, pending, timer}, show_progress="hidden")
    live.source.focus(lambda value: gr.Dropdown(choices=source_choices(runs_dir, keep=value or "")),
                      inputs=live.source, outputs=live.source)


def _under(path: Path, runs_dir: Path) -> bool:
    """The page shows files under the runs folder only (the app's allowed path)."""
    try:
        return path.exists() and path.resolve().is_relative_to(runs_dir.resolve())
    except OSError:
        return False
