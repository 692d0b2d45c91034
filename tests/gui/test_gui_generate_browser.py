"""Browser test of the Generate tab: a tiny generation started from the page shows its images as they come.

    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q tests/gui/test_gui_generate_browser.py
"""
from __future__ import annotations

import json
import re

import pytest

from browser_app import App, expect

pytestmark = pytest.mark.browser

GENERATE_S = 120  # job start-up (torch, diffusers, the tiny model) and 2 tiny images on a busy 2-core CPU


def _fill(pg, name: str, value: str) -> None:
    field = pg.locator(f"#gen-{name}").locator("textarea, input").first
    field.fill(value)
    field.press("Tab")  # commit the value before a button reads it
    expect(field).to_have_value(value)


def test_generate_tab_shows_images_as_they_are_made(page, browser, demo_app: App, shots) -> None:  # noqa: F811
    page.goto(demo_app.url)
    page.get_by_role("tab", name="Generate", exact=True).click()
    _fill(page, "model", "demo/tiny-sd1")
    page.locator("#gen-prompts textarea").fill("a red fox --n blurry\na blue bird --d 3")
    page.locator("#gen-prompts textarea").press("Tab")
    _fill(page, "steps", "2")  # no size: the demo model's own 64 px, said before it starts
    other = browser.new_context().new_page()  # another browser: it did not start the job, yet shows it
    try:  # (open before the start: on an idle machine the tiny job ends within seconds of starting)
        other.goto(demo_app.url)
        other.get_by_role("tab", name="Generate", exact=True).click()
        page.locator("#gen-start").click()
        status = page.locator("#gen-status")
        expect(status).to_contain_text(re.compile(r"64×64 px, the model's own size|Generating|Finished"),
                                       timeout=30_000)
        said = re.compile(r"(Started|Starting:|Generating:|Finished:)\s+(\S+)")  # a tick may replace "Started"
        expect(status).to_contain_text(said, timeout=30_000)
        job_id = said.search(status.inner_text()).group(2)
        expect(other.locator("#gen-status")).to_contain_text(job_id, timeout=30_000)
        expect(other.locator("#gen-status")).to_contain_text("Finished", timeout=GENERATE_S * 1000)
        expect(other.locator("#gen-gallery img")).to_have_count(2, timeout=30_000)
    finally:
        other.context.close()
    expect(status).to_contain_text("Finished", timeout=GENERATE_S * 1000)
    expect(status).to_contain_text("2 / 2")
    expect(page.locator("#gen-gallery img")).to_have_count(2, timeout=30_000)
    page.screenshot(path=str(shots / "generate-tab.png"), full_page=True)
    events = [json.loads(line) for line in (demo_app.runs_dir / job_id / "events.jsonl").read_text().splitlines()]
    assert [e["seed"] for e in events if e["type"] == "image"] == [0, 3]
    assert json.loads((demo_app.runs_dir / job_id / "status.json").read_text())["method"] == "generate"


def test_compare_saves_fills_the_compare_form_from_a_finished_run(page, demo_app: App) -> None:  # noqa: F811
    """A finished run's panel offers "Compare saves": the Generate tab opens with its model, saves and prompts."""
    run = demo_app.runs_dir / "20260101-000000-lora-fox-1"
    saves = run.parent.parent / "fox out"
    saves.mkdir(parents=True, exist_ok=True)
    run.mkdir(parents=True, exist_ok=True)
    lines = []
    for epoch in (1, 2):
        (saves / f"fox-{epoch:06d}.safetensors").write_bytes(b"")
        lines.append(json.dumps({"type": "checkpoint", "path": str(saves / f"fox-{epoch:06d}.safetensors"),
                                 "epoch": epoch, "step": epoch, "final": False}))
    (run / "events.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (run / "config.toml").write_text('method = "lora"\n[model]\npretrained_model_name_or_path = "demo/tiny-sd1"\n'
                                     '[sampling]\nsample_prompt_lines = ["a red fox --d 4", "a cat"]\n', encoding="utf-8")
    (run / "status.json").write_text(json.dumps({"state": "finished", "method": "lora", "created": 1.0}))
    page.goto(demo_app.url)
    page.get_by_role("tab", name="Runs", exact=True).click()
    pick = page.locator("#runs-pick input")
    expect(page.locator("#runs-table")).to_contain_text(run.name, timeout=15_000)
    pick.click()
    page.get_by_role("option", name=run.name).click()
    page.get_by_role("button", name="Show in run panel").click()
    expect(page.locator("#run-title")).to_contain_text(run.name)
    page.locator("#run-compare").click()
    expect(page.locator("#gen-status")).to_contain_text("2 saves: epoch 1, epoch 2")
    expect(page.locator("#gen-prompts textarea")).to_have_value("a red fox --d 4\na cat")
    expect(page.locator("#gen-model input, #gen-model textarea").first).to_have_value("demo/tiny-sd1")
    expect(page.locator("#gen-compare")).to_be_visible()


@pytest.fixture(autouse=True)
def _no_job_left(demo_app: App):  # noqa: F811
    yield
    from test_gui_browser import _stop_runs

    _stop_runs(demo_app.runs_dir)
