"""Browser test of the Tools tab: inspect run from the page shows its report and its files to download.

    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q tests/tools/test_tools_browser.py
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from browser_app import App, expect  # the app, page and browser fixtures are conftest's
from lora_samples import sample_modules, write

pytestmark = pytest.mark.browser

INSPECT_S = 90  # the job's start-up (torch) and the report, on a busy 2-core CPU


def test_inspect_from_the_tools_tab_shows_the_report_and_its_files(page, demo_app: App, shots: Path,  # noqa: F811
                                                                    tmp_path: Path) -> None:
    lora = write(tmp_path / "my lora é.safetensors", sample_modules(),
                 {"ss_dataset_dirs": json.dumps({"10_sks dog": {"n_repeats": 10, "img_count": 2}})})
    page.goto(demo_app.url)
    page.get_by_role("tab", name="Tools", exact=True).click()
    expect(page.locator("#tools-inspect-run")).to_be_visible()  # inspect is the first tool
    field = page.locator("#tools-inspect-file").locator("textarea, input").first
    field.fill(str(lora))
    field.press("Tab")
    page.locator("#tools-inspect-run").click()
    status = page.locator("#tools-status")
    expect(status).to_contain_text("Finished: tools inspect", timeout=INSPECT_S * 1000)
    report = page.locator("#tools-report")
    expect(report).to_contain_text("LoRA my lora é.safetensors")
    expect(report).to_contain_text("SD1.x (its metadata: ss_base_model_version = sd_v1)")
    expect(report).to_contain_text("Forge")
    expect(report).to_contain_text("sks dog")
    files = page.locator("#tools-files")
    for name in ("report.md", "report.json"):  # downloadable
        expect(files.get_by_role("row", name=re.compile(rf"^{re.escape(name)} "))).to_have_count(1)
    page.screenshot(path=str(shots / "tools-tab.png"), full_page=True)
    job = next(p for p in demo_app.runs_dir.iterdir() if "tools-inspect" in p.name)
    status_file = json.loads((job / "status.json").read_text())
    assert (status_file["state"], status_file["method"], status_file["verb"]) == ("finished", "tools", "inspect")
