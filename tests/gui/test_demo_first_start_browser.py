"""The first `app.py --demo` of a fresh checkout (no demo/ folder yet): the page answers at once and says how far the
demo model is, the model is ready soon after from the shipped weights, and the Generate tab opens on the demo.

    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q tests/gui/test_demo_first_start_browser.py
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from helpers import free_port
from browser_app import REPO, UI_MS, VIEWPORT, App, _env, _stop_app, expect

pytestmark = pytest.mark.browser

PAGE_S = 60  # the command to the page answering: Gradio's import and the page's build on a busy 2-core CPU; the
# demo build must not add to it (it used to: minutes of teaching the model before the first byte)
READY_S = 240  # the demo model from the shipped weights: the build process imports torch and diffusers


def _fresh_checkout(folder: Path) -> Path:
    """What a fresh clone holds for the GUI (no demo/, no runs/), with the working tree's code."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("gui", "trainers", "presets"):
        shutil.copytree(REPO / name, folder / name, ignore=skip)
    shutil.copy2(REPO / "app.py", folder / "app.py")
    return folder


def _serve(clone: Path, workdir: Path) -> tuple[App, float]:
    """The app on the fresh checkout, once it answers, and when its command started (time.monotonic)."""
    port = free_port()
    log = workdir / "app.log"
    cmd = [sys.executable, "app.py", "--headless", "--demo", "--server-port", str(port), "--runs-dir",
           str(workdir / "runs"), "--presets-dir", str(workdir / "presets")]
    started = time.monotonic()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, cwd=clone, env=_env(), stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    app = App(f"http://127.0.0.1:{port}/", proc, log, workdir / "runs")
    while time.monotonic() - started < PAGE_S:
        if proc.poll() is not None:
            pytest.fail(f"app.py exited with code {proc.returncode} before serving:\n{app.output()}")
        try:
            with urllib.request.urlopen(app.url, timeout=5) as response:
                if response.status == 200:
                    return app, started
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.2)
    _stop_app(app)  # the demo build goes with it: it runs in the app's process group
    pytest.fail(f"the first `app.py --demo` did not answer within {PAGE_S} s:\n{app.output()}")


def test_the_first_demo_start_serves_the_page_at_once_and_prepares_the_demo_behind_it(browser,  # noqa: F811
                                                                                      tmp_path: Path) -> None:
    clone = _fresh_checkout(tmp_path / "atelier")
    app, started = _serve(clone, tmp_path)
    print(f"the page answered {time.monotonic() - started:.1f} s after the command")
    try:
        page = browser.new_context(viewport=VIEWPORT).new_page()
        page.set_default_timeout(UI_MS)
        page.goto(app.url)
        notice = page.locator("#demo-notice")
        expect(notice).to_contain_text(re.compile(r"Preparing the demo model|The demo model is ready"))
        expect(notice).to_contain_text("The demo model is ready", timeout=READY_S * 1000)
        print(f"the demo model was ready {time.monotonic() - started:.1f} s after the command")
        assert '"weights": "shipped' in (clone / "demo" / "tiny-sd1" / "atelier_demo.json").read_text()
        assert sorted(p.name for p in (clone / "demo" / "data").glob("*/*.png"))

        page.get_by_role("tab", name="Generate", exact=True).click()
        expect(page.locator("#gen-model input, #gen-model textarea").first).to_have_value("demo/tiny-sd1")
        expect(page.locator("#gen-prompts textarea")).to_have_value(
            "sks shape, grey cross --s 20 --d 1\nsks shape, grey cross --s 20 --d 2")
        expect(page.locator("#gen-loras textarea")).to_have_value("")  # no demo run has saved a LoRA yet
        (clone / "demo" / "output").mkdir()
        save_file({"lora_unet_x.lora_down.weight": np.zeros((2, 2), np.float32)},
                  clone / "demo" / "output" / "demo_lora.safetensors")  # as a demo run saves it
        page.get_by_role("tab", name="LoRA", exact=True).click()
        page.get_by_role("tab", name="Generate", exact=True).click()
        expect(page.locator("#gen-loras textarea")).to_have_value("demo/output/demo_lora.safetensors")
        page.context.close()
    finally:
        _stop_app(app)
