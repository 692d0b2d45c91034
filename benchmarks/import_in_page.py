"""How long the page takes to show an imported config: the page served in this process, a kohya_ss JSON imported on
the LoRA tab in Debian's chromium (Playwright), seconds from choosing the file to its report, and the seconds the
server spent on the events that carry form fields (over 100 of them).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/import_in_page.py    # one JSON line

On an idle 2-core machine, three imports in a row: when an import sent and updated every method tab's fields (1,051
inputs, 1,056 outputs) they were shown after 26.4, 69.4 and 82.2 s (0.7-0.9 s of each on the server: the rest was
the browser's); through the receiving tab's mailbox (gui/config_import.py: one tab's 240 fields) after 6.7, 4.4 and
4.7 s (0.15-0.24 s on the server).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

CHROMIUM = "/usr/bin/chromium"


def main(rounds: int = 3) -> None:
    from playwright.sync_api import sync_playwright

    from gui.jobs import JobManager
    from gui.page import Services, build_page, queue_page
    from gui.presets import Presets
    from gui.run_files import Watchers
    from tests.helpers import free_port

    base = Path(tempfile.mkdtemp())
    runs = base / "runs"
    runs.mkdir()
    page = build_page(Services(runs, JobManager(runs), Presets(base / "presets"), Watchers(), [base]))
    queue_page(page)
    server_s: list[float] = []
    process_api = page.process_api

    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.time()
        try:
            return await process_api(*args, **kwargs)
        finally:
            block_fn = kwargs.get("block_fn")
            if block_fn is not None and len(block_fn.inputs) + len(block_fn.outputs) > 100:
                server_s.append(time.time() - started)

    page.process_api = timed  # type: ignore[method-assign]
    port = free_port()
    page.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, footer_links=[])
    shown: list[float] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            tab = browser.new_page(viewport={"width": 1400, "height": 1000})
            tab.goto(f"http://127.0.0.1:{port}/")
            tab.locator("#import-lora").wait_for(timeout=120_000)
            for i in range(rounds):
                kohya = base / f"kohya-{i}.json"  # a new rate each round: the report lists it as changed
                kohya.write_text(json.dumps({"LoRA_type": "Standard", "learning_rate": 0.0003 * (i + 2)}),
                                 encoding="utf-8")
                started = time.time()
                with tab.expect_file_chooser() as chooser:
                    tab.locator("#import-lora").click()
                chooser.value.set_files(str(kohya))
                tab.locator("#report-lora").get_by_text(kohya.name).first.wait_for(timeout=180_000)
                shown.append(round(time.time() - started, 2))
            browser.close()
    finally:
        page.close()
    print(json.dumps({"import_shown_s": shown, "server_s": [round(s, 2) for s in server_s]}))


if __name__ == "__main__":
    main()
