"""How often each open page refreshes its run panel (gui/refresh_budget.py)."""
from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gui.refresh_budget import SEEN_FOR_S, RefreshBudget
from helpers import free_port

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
httpx = pytest.importorskip("httpx")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_few_pages_refresh_every_second_and_many_share_the_budget() -> None:
    clock = Clock()
    budget = RefreshBudget(per_s=5.0, clock=clock)
    assert [budget.interval(f"page-{n}") for n in range(5)] == [1.0] * 5
    assert budget.interval("page-5") == 1.5  # six pages: 6 / 5 s, in half-second steps
    for n in range(6, 20):
        budget.interval(f"page-{n}")
    assert budget.interval("page-0") == 4.0  # twenty pages at 5 refreshes a second together


def test_a_closed_page_stops_counting() -> None:
    clock = Clock()
    budget = RefreshBudget(per_s=5.0, clock=clock)
    for n in range(20):
        budget.interval(f"page-{n}")
    clock.now += SEEN_FOR_S + 1  # nineteen tabs closed: only page-0 still refreshes
    assert budget.interval("page-0") == 1.0


# --- the run panel's refresh as a page sends it: a real Blocks event, in this process -----------------------------

def _progress(run: Path, step: int) -> None:
    from trainers.core import events as ev

    ev.EventWriter(run).emit(ev.Progress(step=step, total_steps=500, epoch=1, total_epochs=5, loss=0.2,
                                         loss_smoothed=0.2, lr=1e-4, it_per_s=8.0, images_per_s=8.0))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, dict]]:
    """The page served as app.py serves it, with a running run: (url, the run's folder, the page's config)."""
    from gui.jobs import JobManager
    from gui.page import Services, build_page, queue_page
    from gui.presets import Presets
    from gui.run_files import Watchers
    from trainers.core.registry import METHOD_NAMES

    base = tmp_path_factory.mktemp("refresh")
    run = base / "runs" / "20260101-000000-lora-live"
    run.mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({"state": "running", "method": METHOD_NAMES[0],
                                                 "trainer_pid": os.getpid(), "created": time.time()}))
    (run / "train.log").write_text("loading\n", encoding="utf-8")
    for step in range(1, 6):
        _progress(run, step)
    page = build_page(Services(base / "runs", JobManager(base / "runs"), Presets(base / "presets"),
                               Watchers(min_interval_s=0.0), [base]))
    queue_page(page)
    port = free_port()
    page.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, footer_links=[])
    try:
        url = f"http://127.0.0.1:{port}/"
        yield url, run, httpx.get(f"{url}config", timeout=60).json()
    finally:
        page.close()


def _tick(config: dict) -> dict:
    """The run panel's timer refresh in the page's config."""
    title = next(c["id"] for c in config["components"] if c["props"].get("elem_id") == "run-title")
    timers = {c["id"] for c in config["components"] if c["type"] == "timer"}
    return next(d for d in config["dependencies"]
                if title in d["outputs"] and any(t in timers and event == "tick" for t, event in d["targets"]))


def _poll(url: str, tick: dict, run_id: str, session: str) -> list[Any]:
    """What the page's timer sends, outside the queue: one POST to Gradio's run route, answered with the outputs."""
    timer = next(t for t, event in tick["targets"] if event == "tick")
    answer = httpx.post(f"{url}gradio_api/run/predict", timeout=60, json={
        "data": [run_id, None], "fn_index": tick["id"], "session_hash": session, "event_data": None,
        "trigger_id": timer})
    assert answer.status_code == 200, answer.text[:500]
    return answer.json()["data"]


def test_the_refresh_goes_outside_the_queue_and_still_follows_the_run(served) -> None:
    url, run, config = served
    tick = _tick(config)
    assert tick["queue"] is False  # a plain POST, no queue join and event stream
    ids = {c["props"].get("elem_id"): c["id"] for c in config["components"]}
    at = {name: tick["outputs"].index(ids[name]) for name in ("run-title", "run-progress", "run-stats", "run-chart")}
    first = _poll(url, tick, run.name, "page-a")
    assert "Training" in first[at["run-title"]]
    assert "5 / 500 steps" in first[at["run-progress"]]
    again = _poll(url, tick, run.name, "page-a")  # nothing new: the page is sent nothing
    assert again[at["run-title"]] == {"__type__": "update"} and again[at["run-progress"]] == {"__type__": "update"}
    _progress(run, 6)
    later = _poll(url, tick, run.name, "page-a")
    assert "6 / 500 steps" in later[at["run-progress"]]  # the running run's step count moved on
    assert later[at["run-title"]] == {"__type__": "update"}  # and what did not change is still not sent
    _progress(run, 7)
    nothing = _poll(url, tick, "", "page-a")  # no run shown: nothing sent, the cheapest answer
    assert all(value == {"__type__": "update"} for value in nothing[:-1])
    assert "7 / 500 steps" in _poll(url, tick, run.name, "page-a")[at["run-progress"]]
    other = _poll(url, tick, run.name, "page-b")  # a second page gets the whole panel, charts included
    assert "7 / 500 steps" in other[at["run-progress"]]
    chart = other[at["run-chart"]]
    assert chart["__type__"] == "update" and chart["visible"] is True
    rows = [dict(zip(chart["value"]["columns"], row)) for row in chart["value"]["data"]]
    assert [row["loss"] for row in rows if row["series"] == "raw"] == [0.2] * 5  # drawn at most every CHART_EVERY_S
    assert chart == first[at["run-chart"]]  # the drawing every page is sent, prepared once
