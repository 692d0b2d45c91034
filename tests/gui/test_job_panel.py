"""The one job status panel (gui/job_status.py) as the three job tabs build it: each tab's refresh and Stop are the
panel's; a refresh adopts a job running that this browser did not start and sends each output only when it
changed; Stop on no job says so. No browser, no job process."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import gradio as gr

from gui.caption_tab import build_caption_tab
from gui.generate_tab import build_generate_tab
from gui.tools_tab import build_tools_tab

SKIPPED = gr.skip()


def _handlers(blocks: gr.Blocks, name: str) -> list[Callable[..., Any]]:
    return [f.fn for f in blocks.fns.values() if f.name == name and f.fn.__module__ == "gui.job_status"]


def test_the_three_job_tabs_refresh_and_stop_through_one_panel(tmp_path: Path) -> None:
    services = SimpleNamespace(runs_dir=tmp_path, jobs=None, queue=None, allowed_roots=None)
    with gr.Blocks() as blocks:
        build_generate_tab(services)
        build_tools_tab(services)
        build_caption_tab(services)
    ticks, stops = _handlers(blocks, "tick"), _handlers(blocks, "on_stop")
    assert len(ticks) == 3 and len(stops) == 3
    assert all(stop("") == "No job to stop." for stop in stops)
    assert all(tick("", None)[:-1] == [SKIPPED] * (len(tick("", None)) - 1) for tick in ticks)


def test_a_refresh_adopts_the_running_job_and_sends_only_what_changed(tmp_path: Path) -> None:
    job = tmp_path / "20260101-000000-tools-inspect-x-1"
    job.mkdir()
    (job / "status.json").write_text(json.dumps({
        "state": "running", "method": "tools", "verb": "inspect", "pgid": os.getpid(), "launcher_pid": os.getpid(),
        "trainer_pid": os.getpid(), "created": time.time()}))
    services = SimpleNamespace(runs_dir=tmp_path, jobs=None, queue=None, allowed_roots=None)
    with gr.Blocks() as blocks:
        build_tools_tab(services)
    tick = _handlers(blocks, "tick")[0]
    adopted, status, report, files, keys = tick("", None)
    assert adopted == job.name and status.startswith(f"### Running: tools inspect `{job.name}`")
    assert report == "" and files.visible is False
    again = tick(job.name, keys)
    assert again[:-1] == [SKIPPED] * 4 and again[-1] == keys  # nothing changed: nothing sent
