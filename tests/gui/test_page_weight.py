"""What one page load costs: the page as the browser downloads it, and the title line it opens with.

The page is served in this process as app.py serves it (without a login) and fetched over HTTP once.
"""
from __future__ import annotations

import contextvars
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from helpers import free_port

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
httpx = pytest.importorskip("httpx")

PAGE_LIMIT = 1_700_000  # bytes of the page (HTML with its config); it was 6.9 MB (5 MB of it API docs), 1.88 MB with
# every option's whole help under its field (1.82 MB with its first sentence and a link to the rest); 1.91 MB with
# the families of 2026-12-02's fifth session, 1.55 MB once Gradio's per-component API info left the page
# (gui/page_config.py); 1.64 MB on 2026-12-03 with Anima's, HiDream-O1's and LTX-2 audio's 8 options in each of the
# 5 training tabs (about 590 bytes a component, 97 more) and Generate's and the tools' model files. Issue 38's goal:
# under 2 MB


class Served(NamedTuple):
    url: str
    page: Any
    runs: Path  # its runs folder


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    from gui.jobs import JobManager
    from gui.page import Services, build_page, queue_page
    from gui.presets import Presets
    from gui.run_files import Watchers

    from gradio.context import Context

    base = tmp_path_factory.mktemp("weight")
    runs = base / "runs"
    runs.mkdir()
    # numbered from 0 as in the app: each component's id is written in the page a few times, so ids grown by the
    # pages other tests built in this process (5 digits instead of 4) weigh tens of KB
    built_before, Context.id = Context.id, 0
    page = build_page(Services(runs, JobManager(runs), Presets(base / "presets"), Watchers(), [base]))
    Context.id = max(Context.id, built_before)
    queue_page(page)  # as app.py queues it
    port = free_port()
    page.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, footer_links=[])
    try:
        yield Served(f"http://127.0.0.1:{port}", page, runs)
    finally:
        page.close()


def test_the_page_a_browser_downloads_stays_under_1_7_mb(served) -> None:
    url = served.url
    with httpx.Client(base_url=url, timeout=60) as client:
        page = client.get("/")
    assert page.status_code == 200
    assert len(page.content) < PAGE_LIMIT, f"the page is {len(page.content) / 1e6:.2f} MB"
    assert "code_snippets" not in page.text and '"api_info' not in page.text  # no API docs in it


def test_the_page_events_stay_callable_without_their_api_docs(served) -> None:
    url, page = served.url, served.page
    with httpx.Client(base_url=url, timeout=60) as client:
        info = client.get("/gradio_api/info").json()
    assert info["named_endpoints"] == {}
    assert all(fn.api_visibility != "private" or fn.fn is None for fn in page.fns.values())


def test_the_title_line_names_every_registered_method_and_family(served) -> None:
    from trainers.core.registry import FAMILIES, METHODS
    from trainers.models.rules import rules_of

    page = served.page
    title = next(c for c in page.get_config_file()["components"] if c["props"].get("elem_id") == "page-title")
    text = title["props"]["value"]
    missing = [f.name for f in FAMILIES if rules_of(f.name).title not in text]
    missing += [m.name for m in METHODS if m.title not in text]
    assert not missing, f"the title line leaves out {missing}: {text}"


def test_a_running_runs_charts_are_redrawn_every_few_seconds_and_its_text_every_tick(tmp_path, monkeypatch) -> None:
    import json

    from gradio.context import LocalContext

    import gui.run_panel as run_panel
    from gui.run_files import RunWatcher
    from trainers.core import events as ev

    # as the page's poll does: in an event handler Gradio leaves unset what a component built there does not update
    in_handler = contextvars.ContextVar[bool]("in_event_listener")
    in_handler.set(True)
    monkeypatch.setattr(LocalContext, "in_event_listener", in_handler)
    run = tmp_path / "run"
    run.mkdir()
    status = {"state": "running", "launcher_pid": os.getpid(), "method": "lora"}
    (run / "status.json").write_text(json.dumps(status))
    writer, watcher = ev.EventWriter(run), RunWatcher(run)

    def step(n: int) -> list:
        writer.emit(ev.Progress(step=n, total_steps=100, epoch=1, total_epochs=1, loss=1.0 / n, loss_smoothed=0.5,
                                lr=1e-4, it_per_s=1.0, images_per_s=2.0))
        return run_panel.render(watcher.refresh())

    for n in range(1, 5):
        drawn = step(n)
    assert drawn[3][1].constructor_args["visible"]
    later = step(5)
    assert later[1][0] != drawn[1][0] and "5 / 100 steps" in later[1][1]  # the progress is new at every tick
    assert later[3][0] == drawn[3][0] and later[4][0] == drawn[4][0]  # the charts wait: the pages send nothing
    monkeypatch.setattr(run_panel, "CHART_EVERY_S", 0.0)
    assert step(6)[3][0] != drawn[3][0]  # their time came: steps 5 and 6 are drawn
    monkeypatch.undo()
    drawn = step(7)
    (run / "status.json").write_text(json.dumps({**status, "state": "finished"}))
    assert run_panel.render(watcher.refresh())[3][0] != drawn[3][0]  # an ended run shows its whole curve at once


def test_a_new_session_builds_no_config_copy_of_every_component_until_a_deep_link_asks(served, monkeypatch) -> None:
    import gradio.blocks
    from gradio import state_holder

    page = served.page
    title = next(c["id"] for c in page.get_config_file()["components"] if c["props"].get("elem_id") == "run-title")
    built = []
    original = gradio.blocks.BlocksConfig.config_for_block
    monkeypatch.setattr(gradio.blocks.BlocksConfig, "config_for_block",
                        staticmethod(lambda *args, **kw: built.append(args[0]) or original(*args, **kw)))
    session = page.state_holder["a-new-page"]  # what a page's first event sets up
    assert isinstance(session, state_holder.SessionState)
    session._update_value_in_config(title, "### Training: `run-1`")  # an event sets the run panel's title
    assert len(built) < 10, f"{len(built)} component configs built for one new session"
    shown = {c["id"]: c for c in session.components}  # a deep link: every component, with this session's values
    assert len(shown) > 1000 and shown[title]["props"]["value"] == "### Training: `run-1`"


def test_with_many_pages_open_each_refreshes_its_run_panel_less_often(served) -> None:
    """All open pages together refresh at most PAGE_REFRESHES_PER_S times a second: each page's timer is told
    its interval by the refresh, 1 s while few pages are open."""
    import json

    import gradio as gr

    from gui.refresh_budget import PAGE_REFRESHES_PER_S

    page = served.page
    config = page.get_config_file()
    comps = {c["id"]: c for c in config["components"]}
    title = next(c["id"] for c in config["components"] if c["props"].get("elem_id") == "run-title")
    tick = next(d for d in config["dependencies"] if title in d["outputs"]
                and any(event == "tick" for _, event in d["targets"]))
    timer = next(t for t, event in tick["targets"] if event == "tick")
    assert comps[timer]["type"] == "timer" and tick["outputs"].index(timer) >= 0
    run = served.runs / "run-1"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "running", "launcher_pid": os.getpid(), "method": "lora"}))
    refresh = page.fns[tick["id"]].fn

    def interval(session: str) -> float:
        answer = refresh("run-1", None, gr.Request(session_hash=session))
        return answer[tick["outputs"].index(timer)].constructor_args["value"]

    assert interval("page-0") == 1.0
    for n in range(1, 20):
        every_s = interval(f"page-{n}")
    assert every_s == 20 / PAGE_REFRESHES_PER_S == 4.0


def test_the_page_queue_waits_for_work_without_spinning(served) -> None:
    from gui.page import QUEUE_IDLE_S

    page = served.page
    assert page._queue.sleep_when_free == QUEUE_IDLE_S >= 0.01  # Gradio's 1 ms took 5% of a core from training


def test_a_long_runs_charts_send_a_few_hundred_points_a_line() -> None:
    from gui.run_panel import CHART_POINTS, thinned

    steps = list(range(1, 10_001))
    kept = thinned(steps)
    assert len(kept) <= CHART_POINTS and kept[0] == 1 and kept[-1] == 10_000  # the newest step always shown
    assert thinned(steps[:300]) == steps[:300]  # a short run: every step
    gaps = {b - a for a, b in zip(kept, kept[1:-1])}
    assert gaps == {max(gaps)}  # evenly spaced
