"""Browser test of the Generate tab's paused-run source (gui/live_render.py): a paused run is offered as the model
source, Render writes the request, and the run's answer (here a stand-in for the trainer: a thread that takes the
request, writes an image and its live_render event) is shown in the tab's status and gallery.

    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q tests/gui/test_live_render_browser.py
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from PIL import Image

from browser_app import App, expect
from trainers.core.events import EventWriter, LiveRender
from trainers.core.rundir import LIVE, take_render_request, update_status

pytestmark = pytest.mark.browser


def _stand_in_trainer(run: Path, taken: list[dict], stop: threading.Event) -> None:
    """Answer the first render request as a paused trainer does: an image in live/ and its event."""
    while not stop.is_set():
        wanted = take_render_request(run)
        if isinstance(wanted, dict):
            taken.append(wanted)
            image = run / LIVE / "step000003-001.png"
            image.parent.mkdir(exist_ok=True)
            Image.new("RGB", (64, 64), (200, 30, 30)).save(image)
            EventWriter(run).emit(LiveRender(request=wanted["id"], step=3, path=str(image), prompt=wanted["prompt"],
                                             seed=wanted.get("seed"), multiplier=wanted["multiplier"]))
            return
        time.sleep(0.1)


def test_render_from_a_paused_run_shows_its_image(page, demo_app: App) -> None:  # noqa: F811
    run = demo_app.runs_dir / "20260101-000000-lora-paused-1"
    run.mkdir(parents=True, exist_ok=True)
    update_status(run, state="paused", method="lora", trainer_pid=os.getpid(), created=1.0)
    taken: list[dict] = []
    stop = threading.Event()
    trainer = threading.Thread(target=_stand_in_trainer, args=(run, taken, stop), daemon=True)
    trainer.start()
    try:
        page.goto(demo_app.url)
        page.get_by_role("tab", name="Generate", exact=True).click()
        prompts = page.locator("#gen-prompts textarea")
        prompts.fill("sks shape, a red cross --d 4")
        prompts.press("Tab")
        page.locator("#gen-source input").click()
        page.get_by_role("option", name=f"the paused run {run.name}").click()
        multiplier = page.locator("#gen-live-multiplier input")
        multiplier.fill("0.5")
        multiplier.press("Tab")
        page.locator("#gen-live-render").click()
        status = page.locator("#gen-status")
        expect(status).to_contain_text(f"Rendered by {run.name} at step 3")
        expect(status).to_contain_text("LoRA multiplier 0.5")
        expect(page.locator("#gen-gallery img")).to_have_count(1)
        assert taken[0]["prompt"] == "sks shape, a red cross" and taken[0]["seed"] == 4
        assert taken[0]["multiplier"] == 0.5

        update_status(run, state="running")  # not paused: Render says so and asks nothing
        page.locator("#gen-live-render").click()
        expect(status).to_contain_text("The run must be paused")
    finally:
        stop.set()
        update_status(run, state="finished")
