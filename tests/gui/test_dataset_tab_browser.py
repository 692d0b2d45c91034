"""Browser test of the Dataset tab and the folder browser, on one page load of an app whose only allowed root is a
temp folder: the gallery, a caption edited in place, a bulk edit previewed, applied and undone, and the folder
browser and the tab refusing a path outside the root.

    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q tests/gui/test_dataset_tab_browser.py
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from image_files import save_image
from browser_app import App, _start_app, _stop_app, expect, page_at

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("allowed")
    concept = root / "data" / "5_sks fox"
    for number in range(3):
        save_image(concept / f"fox{number}.png", (48, 64), seed=number)
        (concept / f"fox{number}.txt").write_text(f"fox, red, pose {number}", encoding="utf-8")
    (concept / "broken.png").write_bytes(b"not an image")
    return root.resolve()


@pytest.fixture(scope="module")
def app(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    started = _start_app(["--allowed-root", str(root)], tmp_path_factory.mktemp("dataset_app"))
    try:
        yield started
    finally:
        _stop_app(started)


@pytest.fixture(scope="module")
def tab(browser, app: App) -> Iterator:  # noqa: F811 - one page load for every test here
    with page_at(browser) as pg:
        pg.goto(app.url)
        pg.get_by_role("tab", name="Dataset", exact=True).click()
        yield pg


def _type(pg, elem_id: str, value: str) -> None:
    field = pg.locator(f"#{elem_id}").locator("textarea, input").first
    field.fill(value)
    field.press("Tab")
    expect(field).to_have_value(value)


def captions(root: Path) -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted((root / "data" / "5_sks fox").glob("*.txt"))]


def test_gallery_caption_edit_and_bulk_edit_with_undo(tab, root: Path) -> None:
    _type(tab, "dataset-folder", str(root / "data"))
    tab.locator("#dataset-open").click()
    status = tab.locator("#dataset-status")
    expect(status).to_contain_text("3 image(s) in 1 concept folder(s)")
    expect(status).to_contain_text(re.compile(r"1 image\(s\) cannot be read.*broken\.png", re.S))
    expect(tab.locator("#dataset-gallery img")).to_have_count(3)
    expect(tab.locator("#dataset-gallery")).to_contain_text("fox, red, pose 0")

    tab.locator("#dataset-gallery img").nth(1).click()
    caption = tab.locator("#dataset-caption textarea")
    expect(caption).to_have_value("fox, red, pose 1")
    caption.fill("fox, red, sitting")
    tab.locator("#dataset-save").click()
    expect(tab.locator("#dataset-report")).to_contain_text("Saved the caption of fox1.png")
    assert captions(root)[1] == "fox, red, sitting"

    before = captions(root)
    _type(tab, "dataset-op-text", "sks")  # the trigger operation is preselected
    tab.locator("#dataset-preview").click()
    report = tab.locator("#dataset-report")
    expect(report).to_contain_text("3 caption(s) would change")
    expect(report).to_contain_text("sks, fox, red, sitting")
    assert captions(root) == before  # a preview writes nothing
    tab.locator("#dataset-apply").click()
    expect(report).to_contain_text("Applied: trigger 'sks' on 3 caption(s)")
    expect(tab.locator("#dataset-gallery")).to_contain_text("sks, fox, red, pose 0")
    assert captions(root) == [f"sks, {c}" for c in before]
    tab.locator("#dataset-undo").click()
    expect(report).to_contain_text("Undid: trigger 'sks' on 3 caption(s)")
    expect(tab.locator("#dataset-gallery")).not_to_contain_text("sks, fox")
    assert captions(root) == before


def test_folder_browser_lists_the_root_and_refuses_outside_it(tab, root: Path) -> None:
    _type(tab, "dataset-folder", "/etc")
    tab.locator("#dataset-folder").get_by_role("button", name="Browse…").click()
    listing = tab.locator("#browse-list")  # the page's one list, named after the field it fills
    expect(listing).to_be_visible()
    expect(listing).to_contain_text("Pick for: Dataset folder or dataset .toml")
    expect(listing).to_contain_text("the folders this GUI may list")  # /etc is outside: it starts at the roots
    listing.locator("input").click()
    options = tab.get_by_role("option")
    expect(options.first).to_be_visible()
    assert not any("/etc" in text for text in options.all_inner_texts())
    tab.get_by_role("option", name=f"📁 {root}", exact=True).click()
    listing.locator("input").click()
    tab.get_by_role("option", name="📁 data/", exact=True).click()
    listing.locator("input").click()
    tab.get_by_role("option", name=f"✓ use this folder: {root / 'data'}", exact=True).click()
    expect(tab.locator("#dataset-folder textarea, #dataset-folder input").first).to_have_value(str(root / "data"))
    expect(listing).to_be_hidden()
    tab.get_by_role("button", name="Statistics").click()
    model = tab.locator("#dataset-model")  # another field's Browse opens the same list for that field
    model.get_by_role("button", name="Browse…").click()
    expect(listing).to_contain_text("Pick for: Model folder")
    tab.locator("#browse-close").click()
    expect(listing).to_be_hidden()
    _type(tab, "dataset-folder", "/etc")
    tab.locator("#dataset-open").click()
    expect(tab.locator("#dataset-status")).to_contain_text("outside the folders this GUI may use")
    expect(tab.locator("#dataset-gallery img")).to_have_count(0)
