"""Browser tests of the page's layout at a phone's and a desktop's width, and of which run the panel shows.

One app (no --demo: it needs no model) over a runs folder laid out as a user's: two finished training runs (the
newer with 8 samples), a queued run, and a generation job running (newer than all, and holding the CPU, so the
queued run waits). Screenshots go to the test's tmp folder.

    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q tests/gui/test_gui_layout_browser.py
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from gui.jobs import gpu_count, gpu_set
from browser_app import App, _start_app, _stop_app, expect, page_at

pytestmark = pytest.mark.browser

TABS = ("LoRA", "Dreambooth", "Finetune", "Generate", "Runs")
OLDER, SHAPES = "20260101-090000-lora-first", "20260101-100000-lora-shapes"
QUEUED, JOB = "20260101-095000-lora-waiting", "20260101-110000-generate-shapes"
SAMPLES = 8


def _run(runs: Path, run_id: str, status: dict, samples: int = 0) -> None:
    folder = runs / run_id
    (folder / "samples").mkdir(parents=True)
    events = []
    for i in range(samples):
        path = folder / "samples" / f"shapes_{i:06d}.png"
        Image.new("RGB", (64, 64), (30 * i, 120, 200)).save(path)
        events.append({"type": "sample", "path": str(path), "prompt": "a shape", "step": i, "epoch": 1, "index": 0})
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    (folder / "status.json").write_text(json.dumps(status), encoding="utf-8")


@pytest.fixture(scope="module")
def layout_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    work = tmp_path_factory.mktemp("layout_app")
    runs, now = work / "runs", time.time()
    _run(runs, OLDER, {"state": "finished", "method": "lora", "created": now - 7200, "finished": now - 7000})
    _run(runs, SHAPES, {"state": "finished", "method": "lora", "created": now - 3600, "finished": now - 3000,
                        "output": str(work / "shapes.safetensors")}, samples=SAMPLES)
    _run(runs, QUEUED, {"state": "queued", "method": "lora", "created": now - 5400, "queue_position": 1.0})
    devices = ",".join(sorted(gpu_set({})))  # what the queued run wants: the job holds it while this test lives
    _run(runs, JOB, {"state": "running", "method": "generate", "created": now - 60, "launcher_pid": os.getpid(),
                     "gpu_ids": devices, "num_processes": 1})
    app = _start_app([], work)
    try:
        yield app
    finally:
        _stop_app(app)


def _broken_cells(page) -> list[str]:
    """Runs table cells (header included) whose text wraps onto a second line or is cut at the cell's edge."""
    return page.evaluate("""() => [...document.querySelectorAll('#runs-table [role=gridcell], #runs-table th')]
        .filter(c => c.offsetHeight > 0)
        .map(c => [c, c.querySelector('span.text') || c])
        .filter(([c, s]) => s.getClientRects().length > 1
                || s.offsetHeight > 1.5 * parseFloat(getComputedStyle(s).lineHeight)
                || c.scrollWidth > c.clientWidth + 1)
        .map(([c, s]) => JSON.stringify(s.innerText))""")


@pytest.mark.parametrize("width", [400, 1400])
def test_the_page_at_a_phones_and_a_desktops_width(browser, layout_app: App, width: int, tmp_path: Path) -> None:  # noqa: F811
    with page_at(browser, {"width": width, "height": 900}) as page:
        page.goto(layout_app.url)
        # A fresh browser shows the newest training run, not the generation job running now.
        expect(page.locator("#run-title")).to_contain_text(f"Finished: {SHAPES}", timeout=90_000)
        thumbs = page.locator("#run-gallery .grid-container img")
        expect(thumbs).to_have_count(SAMPLES)
        page.screenshot(path=str(tmp_path / f"page_{width}.png"), full_page=True)

        for name in TABS:  # none hides in an overflow menu
            tab = page.get_by_role("tab", name=name, exact=True)
            expect(tab).to_be_visible()
            box = tab.bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= width, (name, box)
        sideways = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert sideways[0] <= sideways[1], f"the page scrolls sideways at {width} px: {sideways}"

        wrap = page.locator("#run-gallery .grid-wrap").bounding_box()
        for i in range(SAMPLES):  # every row of samples in sight, none cropped by the gallery's height
            thumb = thumbs.nth(i).bounding_box()
            assert wrap["y"] <= thumb["y"] and thumb["y"] + thumb["height"] <= wrap["y"] + wrap["height"] + 1, i
            assert thumb["x"] + thumb["width"] <= wrap["x"] + wrap["width"] + 1, i

        page.get_by_role("tab", name="Runs", exact=True).click()
        page.get_by_role("button", name="Refresh", exact=True).click()
        table = page.locator("#runs-table")
        for run_id, state in ((SHAPES, "finished"), (QUEUED, "queued"), (JOB, "running")):
            expect(table.get_by_role("gridcell", name=state, exact=True).first).to_be_visible()
            expect(table.get_by_role("gridcell", name=run_id, exact=True)).to_be_visible()
        assert _broken_cells(page) == [], "Runs table cells broken over lines or cut"
        page.screenshot(path=str(tmp_path / f"runs_{width}.png"), full_page=True)

        table.get_by_role("gridcell", name=QUEUED, exact=True).click()
        stats = page.locator("#run-stats")
        if gpu_count() == 0:
            expect(stats).to_contain_text("Waiting in the queue for the CPU")
            expect(stats).not_to_contain_text("GPU")
        else:
            expect(stats).to_contain_text("Waiting in the queue for GPU 0")


def test_a_reload_keeps_the_viewed_training_run_and_never_trades_it_for_a_job(browser, layout_app: App) -> None:  # noqa: F811
    with page_at(browser, {"width": 1400, "height": 900}) as page:
        title = page.locator("#run-title")
        page.goto(layout_app.url)
        expect(title).to_contain_text(SHAPES, timeout=90_000)
        page.get_by_role("tab", name="Runs", exact=True).click()
        page.get_by_role("button", name="Refresh", exact=True).click()
        page.locator("#runs-table").get_by_role("gridcell", name=OLDER, exact=True).click()
        expect(title).to_contain_text(f"Finished: {OLDER}")
        page.reload()
        expect(title).to_contain_text(f"Finished: {OLDER}", timeout=90_000)  # the run viewed, not the newest

        page.get_by_role("tab", name="Runs", exact=True).click()
        page.get_by_role("button", name="Refresh", exact=True).click()
        page.locator("#runs-table").get_by_role("gridcell", name=JOB, exact=True).click()
        expect(title).to_contain_text(JOB)  # a job can be looked at from the Runs tab...
        page.reload()
        expect(title).to_contain_text(f"Finished: {SHAPES}", timeout=90_000)  # ...but a reload shows a training run
