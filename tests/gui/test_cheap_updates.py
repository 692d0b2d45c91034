"""Skipped outputs and shared charts cost Gradio nothing per page, and each page still receives the same
(gui/cheap_updates.py)."""
from __future__ import annotations

import asyncio
import os
from typing import Any

import gradio as gr
import pandas as pd
from gradio.state_holder import SessionState

from gui import cheap_updates
from gui.cheap_updates import _original, _postprocess_cheaply

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


def _page() -> tuple[gr.Blocks, Any]:
    with gr.Blocks() as page:
        title = gr.Markdown("title")
        chart = gr.LinePlot(pd.DataFrame({"step": [], "loss": []}), x="step", y="loss", visible=False)
        log = gr.Textbox()
        button = gr.Button(visible=False)
        shown = gr.State(None)
        timer = gr.Timer(1.0)
        timer.tick(lambda: None, outputs=[title, chart, log, button, shown])
    fn = next(f for f in page.fns.values() if any(event == "tick" for _, event in f.targets))
    return page, fn


def _both(page: gr.Blocks, fn: Any, predictions: list[Any]) -> tuple[list[Any], list[Any]]:
    """What Gradio sends for `predictions`, and what the cheap path sends, each for a session of its own."""
    async def run() -> tuple[list[Any], list[Any]]:
        plain = await _original(page, fn, list(predictions), SessionState(page))
        cheap = await _postprocess_cheaply(page, fn, list(predictions), SessionState(page))
        return plain, cheap
    return asyncio.run(run())


def test_every_page_receives_what_gradio_would_send() -> None:
    page, fn = _page()
    frame = pd.DataFrame({"step": [1, 2, 3], "loss": [0.3, 0.2, 0.1]})
    chart = gr.LinePlot(frame, visible=True, x_lim=[0, 10])
    cases = [
        [gr.skip()] * 4 + [["keys"]],  # nothing new
        ["### Training", gr.skip(), "log line", gr.skip(), ["keys"]],  # the text moved on
        [gr.skip(), chart, gr.skip(), gr.Button(visible=True), ["keys"]],  # a chart drawn for every page
        [gr.skip(), gr.skip(), gr.skip(), gr.update(visible=True), ["keys"]],  # a lone update dict
        ["a", chart, "b", gr.Button(visible=False), ["keys"]],  # everything
    ]
    for predictions in cases:
        plain, cheap = _both(page, fn, predictions)
        assert cheap == plain, predictions


def test_a_chart_is_prepared_once_for_all_pages() -> None:
    page, fn = _page()
    chart = gr.LinePlot(pd.DataFrame({"step": [1, 2], "loss": [0.3, 0.2]}), visible=True)
    built: list[Any] = []

    async def send(session: SessionState) -> list[Any]:
        return await _postprocess_cheaply(page, fn, [gr.skip(), chart, gr.skip(), gr.skip(), None], session)

    original = cheap_updates._original

    async def counting(*args: Any) -> list[Any]:
        built.append(args[1].outputs)
        return await original(*args)

    cheap_updates._original = counting
    try:
        sessions = [SessionState(page) for _ in range(3)]
        sent = [asyncio.run(send(s)) for s in sessions]
    finally:
        cheap_updates._original = original
    assert sent[0] == sent[1] == sent[2]
    assert sent[0][1]["value"]["data"] == [[1, 0.3], [2, 0.2]]
    charts_built = [outputs for outputs in built if any(isinstance(o, gr.LinePlot) for o in outputs)]
    assert len(charts_built) == 1  # the first page's; the others got the same data
    chart_id = fn.outputs[1]._id
    assert all(isinstance(s[chart_id], gr.LinePlot) and s[chart_id].visible for s in sessions)  # as Gradio keeps it


def test_file_urls_get_the_root_and_prepared_charts_are_not_walked() -> None:
    page, fn = _page()
    chart = gr.LinePlot(pd.DataFrame({"step": [1, 2], "loss": [0.3, 0.2]}), visible=True)
    sent = asyncio.run(_postprocess_cheaply(page, fn, [gr.skip(), chart, gr.skip(), gr.skip(), None],
                                            SessionState(page)))
    image = {"path": "/tmp/a.png", "url": "/gradio_api/file=/tmp/a.png", "meta": {"_type": "gradio.FileData"}}
    data = [dict(image), sent[1], "text"]
    expected = cheap_updates._add_root_url([dict(image), sent[1], "text"], "http://host:7860", None)
    walked: list[Any] = []
    original = cheap_updates._add_root_url

    def counting(value: Any, *args: Any) -> Any:
        walked.append(value)
        return original(value, *args)

    cheap_updates._add_root_url = counting
    try:
        assert cheap_updates._root_url_but_prepared(data, "http://host:7860", None) == expected
    finally:
        cheap_updates._add_root_url = original
    assert expected[0]["url"] == "http://host:7860/gradio_api/file=/tmp/a.png"
    assert all(value is not sent[1] for value in walked)  # the chart's rows were not walked
