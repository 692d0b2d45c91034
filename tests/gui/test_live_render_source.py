"""The Generate tab's "paused run" source (gui/live_render.py): a paused training run is offered as a model source,
Render writes a valid render request into it from the form (and refuses a run that is not paused), and the answer
the run's live_render event gives is shown. No browser, no trainer process."""
from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import gradio as gr

from gui.generate_tab import build_generate_tab
from gui.live_render import FORM, NOT_PAUSED, ask, source_choices
from gui.run_files import Watchers
from trainers.core.events import EventWriter, LiveRender
from trainers.core.render_request import RenderRequest, parse_render_request
from trainers.core.rundir import CONTROL, RENDER_REQUEST, take_render_request, update_status

FORM_VALUES = {"prompts": ["sks shape, a red cross --d 5 --w 512", "second line"], "negative_prompt": "blurry",
               "seed": 0, "width": None, "height": 768, "steps": 12, "cfg_scale": 5.0}


def _run(runs: Path, name: str, state: str) -> Path:
    run = runs / name
    run.mkdir(parents=True)
    update_status(run, state=state, method="lora", trainer_pid=os.getpid(), created=len(name))
    return run


def test_a_paused_run_is_offered_and_asked_for_the_forms_first_prompt(tmp_path: Path) -> None:
    paused, running = _run(tmp_path, "paused-run", "paused"), _run(tmp_path, "busy", "running")
    _run(tmp_path, "done", "finished")
    assert source_choices(tmp_path) == [("the model and LoRAs below", FORM),
                                        ("the paused run paused-run", "paused-run")]

    request_id, text = ask(tmp_path, "paused-run", FORM_VALUES, 0.5)
    assert request_id and "Rendering" in text
    raw = json.loads((paused / CONTROL / RENDER_REQUEST).read_text(encoding="utf-8"))
    assert parse_render_request(raw) == RenderRequest(id=request_id, prompt="sks shape, a red cross",
                                                      negative="blurry", seed=5, steps=12, width=512, height=768,
                                                      cfg_scale=5.0, multiplier=0.5)

    assert ask(tmp_path, "busy", FORM_VALUES, 1.0) == ("", NOT_PAUSED)
    assert not (running / CONTROL / RENDER_REQUEST).exists(), "a run that is not paused is not asked"
    assert ask(tmp_path, "", FORM_VALUES, 1.0)[0] == "" and ask(tmp_path, "../x", FORM_VALUES, 1.0)[0] == ""
    refused, why = ask(tmp_path, "paused-run", {**FORM_VALUES, "prompts": ["a --w 100"]}, 1.0)
    assert not refused and "multiple of 8" in why
    assert "Write a prompt" in ask(tmp_path, "paused-run", {**FORM_VALUES, "prompts": []}, 1.0)[1]


def _handler(blocks: gr.Blocks, name: str) -> Callable[..., Any]:
    return next(f.fn for f in blocks.fns.values() if f.name == name and f.fn.__module__ == "gui.live_render")


def _by_id(blocks: gr.Blocks, elem_id: str) -> Any:
    return next(b for b in blocks.blocks.values() if getattr(b, "elem_id", None) == elem_id)


def test_render_in_the_tab_writes_the_request_and_shows_the_runs_answer(tmp_path: Path) -> None:
    run = _run(tmp_path, "paused-run", "paused")
    services = SimpleNamespace(runs_dir=tmp_path, jobs=None, queue=None, allowed_roots=None,
                               watchers=Watchers(min_interval_s=0))
    with gr.Blocks() as blocks:
        build_generate_tab(services)
    on_render, on_tick = _handler(blocks, "on_render"), _handler(blocks, "on_tick")
    form = {_by_id(blocks, f"gen-{name}"): value for name, value in
            {"prompts": "sks shape\n", "negative_prompt": "", "seed": 3, "width": None, "height": None,
             "steps": 4, "cfg_scale": 7}.items()}
    data = {block: getattr(block, "value", None) for block in blocks.blocks.values()}
    data.update(form)
    data[_by_id(blocks, "gen-source")], data[_by_id(blocks, "gen-live-multiplier")] = "paused-run", 1
    sent = on_render(data)
    pending = next(v for v in sent.values() if isinstance(v, tuple))
    assert pending[0] == "paused-run"
    taken = take_render_request(run)
    assert isinstance(taken, dict) and taken["prompt"] == "sks shape" and taken["id"] == pending[1]
    assert on_tick(pending) == {}, "no answer yet: nothing sent"

    image = run / "live" / "step000001-001.png"
    image.parent.mkdir()
    image.write_bytes(b"png")
    EventWriter(run).emit(LiveRender(request=pending[1], step=1, path=str(image), prompt="sks shape", seed=3,
                                     multiplier=1.0))
    shown = on_tick(pending)
    texts = [v for v in shown.values() if isinstance(v, str)]
    assert any("Rendered by `paused-run` at step 1" in t for t in texts)
    galleries = [v for v in shown.values() if isinstance(v, gr.Gallery)]
    assert len(galleries) == 1 and galleries[0].constructor_args["value"] == [(str(image), "sks shape · seed 3")]

    update_status(run, state="running")
    data[_by_id(blocks, "gen-source")] = "paused-run"
    assert NOT_PAUSED in on_render(data).values()


def test_a_request_left_untaken_by_a_run_that_went_on_is_taken_back(tmp_path: Path) -> None:
    from gui.live_render import unanswered
    from trainers.core.rundir import RunState

    run = _run(tmp_path, "r", "paused")
    request_id, _ = ask(tmp_path, "r", FORM_VALUES, 1.0)
    assert unanswered(run, request_id, RunState.PAUSED) == "", "paused: the run will answer it"
    assert unanswered(run, "another", RunState.RUNNING) == "", "not this page's request"
    assert "went on before it rendered" in unanswered(run, request_id, RunState.RUNNING)
    assert not (run / CONTROL / RENDER_REQUEST).exists()
    assert unanswered(run, request_id, RunState.RUNNING) == "", "taken: the run's answer comes"
    assert "ended before" in unanswered(run, request_id, RunState.FINISHED)


def test_a_paused_runs_panel_says_to_try_it_in_generate(tmp_path: Path) -> None:
    from gui.run_files import RunWatcher
    from gui.run_panel import render
    from trainers.core.events import Progress

    run = _run(tmp_path, "r", "paused")
    update_status(run, activity="paused", launcher_pid=os.getpid())
    EventWriter(run).emit(Progress(step=1, total_steps=8, epoch=1, total_epochs=1, loss=1.0, loss_smoothed=1.0,
                                   lr=1e-4, it_per_s=1.0, images_per_s=2.0))
    stats = render(RunWatcher(run).refresh())[2][1]
    assert stats.startswith("**Paused…**") and "try it in **Generate**" in stats
    update_status(run, state="running", activity="")
    assert "Generate" not in render(RunWatcher(run).refresh())[2][1]
