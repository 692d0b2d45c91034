"""Browser test of the Generate tab: a tiny generation started from the page shows its images as they come.

    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q tests/test_gui_generate_browser.py
"""
from __future__ import annotations

import json
import re

import pytest

from test_gui_browser import App, browser, demo_app, expect, page, shots  # noqa: F401 - fixtures

GENERATE_S = 120  # job start-up (torch, diffusers, the tiny model) and 2 tiny images on a busy 2-core CPU


def _fill(pg, name: str, value: str) -> None:
    field = pg.locator(f"#gen-{name}").locator("textarea, input").first
    field.fill(value)
    field.press("Tab")  # commit the value before a button reads it
    expect(field).to_have_value(value)


def test_generate_tab_shows_images_as_they_are_made(page, demo_app: App, shots) -> None:  # noqa: F811
    page.goto(demo_app.url)
    page.get_by_role("tab", name="Generate", exact=True).click()
    _fill(page, "model", "demo/tiny-sd1")
    page.locator("#gen-prompts textarea").fill("a red fox --n blurry\na blue bird --d 3")
    page.locator("#gen-prompts textarea").press("Tab")
    for name, value in (("width", "64"), ("height", "64"), ("steps", "2")):
        _fill(page, name, value)
    page.locator("#gen-start").click()
    status = page.locator("#gen-status")
    expect(status).to_contain_text("Started", timeout=30_000)
    job_id = re.search(r"Started\s+(\S+)", status.inner_text()).group(1)
    expect(status).to_contain_text("Finished", timeout=GENERATE_S * 1000)
    expect(status).to_contain_text("2 / 2")
    expect(page.locator("#gen-gallery img")).to_have_count(2, timeout=30_000)
    page.screenshot(path=str(shots / "generate-tab.png"), full_page=True)
    events = [json.loads(line) for line in (demo_app.runs_dir / job_id / "events.jsonl").read_text().splitlines()]
    assert [e["seed"] for e in events if e["type"] == "image"] == [0, 3]
    assert json.loads((demo_app.runs_dir / job_id / "status.json").read_text())["method"] == "generate"


@pytest.fixture(autouse=True)
def _no_job_left(demo_app: App):  # noqa: F811
    yield
    from test_gui_browser import _stop_runs

    _stop_runs(demo_app.runs_dir)
