"""Browser test of the Captions & masks tab: a caption job started from the page shows its progress in images/s,
Stop ends it with the finished captions kept, and Resume captions only the rest.

    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q tests/caption/test_caption_browser.py
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from browser_app import App, expect  # the app, page and browser fixtures are conftest's
from tests.caption.conftest import image_folder
from trainers.caption.job import read_done
from trainers.caption.tiny import build_tiny_florence2

pytestmark = pytest.mark.browser

START_S = 120  # the job's start-up (torch, transformers) on a busy 2-core CPU


def fill(page, elem_id: str, text: str) -> None:
    field = page.locator(f"#{elem_id}").locator("textarea, input").first
    field.fill(text)
    field.press("Tab")


# enough that the job is still captioning when Stop is clicked (a tiny Florence-2 on one thread does ~25 images/s;
# with 200 a fast machine finished the job before the screenshot was taken and Stop clicked)
IMAGES = 600


def test_a_caption_job_shows_its_progress_stops_and_resumes(page, demo_app: App, shots: Path,  # noqa: F811
                                                            tmp_path: Path) -> None:
    model = build_tiny_florence2(tmp_path / "florence2")
    images = image_folder(tmp_path / "data", count=IMAGES, side=48)
    before = set(demo_app.runs_dir.iterdir())  # the app is shared: other tests' jobs may be there
    page.goto(demo_app.url)
    page.get_by_role("tab", name="Captions & masks", exact=True).click(timeout=90_000)  # a busy machine: slow first paint
    fill(page, "caption-images", str(images))
    page.locator("#caption-captioner input").click()
    page.get_by_role("option", name="florence2", exact=True).click()
    fill(page, "caption-model", str(model))
    fill(page, "caption-trigger_word", "sks")
    fill(page, "caption-max_new_tokens", "40")
    page.locator("#caption-run").click()
    status = page.locator("#caption-status")
    expect(status).to_contain_text("images/s", timeout=START_S * 1000)
    page.screenshot(path=str(shots / "caption-tab-running.png"))
    page.locator("#caption-stop").click()
    expect(page.locator("#caption-results")).to_contain_text("sks, ")  # the newest captions
    expect(status).to_contain_text("Stopped", timeout=60_000)
    job = next(p for p in set(demo_app.runs_dir.iterdir()) - before if "-caption-" in p.name)
    finished = read_done(job)
    assert 0 < len(finished) < IMAGES
    assert len(list(images.rglob("*.txt"))) == len(finished)
    state = json.loads((job / "status.json").read_text())
    assert (state["state"], state["method"], state["verb"]) == ("stopped", "caption", "caption")

    page.locator("#caption-resume").click()
    expect(status).to_contain_text("Finished", timeout=300_000)
    expect(status).to_contain_text(f"{len(finished)} skipped")
    assert len(list(images.rglob("*.txt"))) == IMAGES
    resumed = next(p for p in set(demo_app.runs_dir.iterdir()) - before if "-caption-" in p.name and p != job)
    assert json.loads((resumed / "report.json").read_text())["written"] == IMAGES - len(finished)
    page.screenshot(path=str(shots / "caption-tab-resumed.png"), full_page=True)
