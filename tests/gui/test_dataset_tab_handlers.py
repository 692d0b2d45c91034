"""The Dataset tab's handlers called as gradio calls them (no browser): what each returns goes through gradio's own
postprocessing, so a value gradio refuses fails here as it fails in the GUI log."""
from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import gradio as gr
import pytest

import gui.dataset_tab as dataset_tab
import gui.thumbnails as thumbnails
from gui.text import plain
from image_files import captioned_images


class Tab:
    """The Dataset tab built in a page of its own, its handlers run through gradio's postprocessing."""

    def __init__(self) -> None:
        with gr.Blocks() as self.blocks:
            self.tab = dataset_tab.build_dataset_tab(SimpleNamespace(allowed_roots=None))
        select = next(f for f in self.blocks.fns.values() if f.name == "on_select")
        self.selected, self.caption, self.loaded = select.outputs
        self.report = next(b for b in self.blocks.blocks.values() if getattr(b, "elem_id", None) == "dataset-report")

    def call(self, wanted: Callable[[Any], bool] | str, *args: Any) -> dict[Any, Any]:
        """The handler's outputs, by component, as gradio sends them to the page (gr.skip(): left as they are); a
        gr.State's as the handler set it (gradio keeps those on the server)."""
        if isinstance(wanted, str):
            name, wanted = wanted, lambda f: f.name == name
        block_fn = next(f for f in self.blocks.fns.values() if wanted(f))
        returned = block_fn.fn(*args)
        sent = asyncio.run(self.blocks.postprocess_data(block_fn, returned, None))
        kept = returned if isinstance(returned, dict) else dict(zip(block_fn.outputs, returned))
        return {block: kept.get(block) if block.stateful else value for block, value in zip(block_fn.outputs, sent)}

    def reloaded(self, folder: str | Path) -> dict[Any, Any]:
        """What the page gets when a caption or mask job ends (the Captions tab sets the Dataset tab's reload)."""
        return self.call(lambda f: (self.tab.reload._id, "change") in f.targets,
                         str(folder), ".txt", dataset_tab.ALL, "")

    def select(self, image: Path) -> dict[str, str]:
        """Pick `image` in the gallery (it lists the one image), as a click does."""
        picked = self.call("on_select", SimpleNamespace(index=0), [str(image)], ".txt")
        return {"image": picked[self.selected], "caption": picked[self.caption], "loaded": picked[self.loaded]}

    def save(self, session: str, picked: dict[str, str], text: str) -> dict[Any, Any]:
        return self.call("on_save", str(Path(picked["image"]).parents[1]), ".txt", dataset_tab.ALL, "", picked["image"],
                         text, picked["loaded"], SimpleNamespace(session_hash=session))

    def undo(self, session: str, folder: Path) -> str:
        undone = self.call("on_undo", str(folder), ".txt", dataset_tab.ALL, "", SimpleNamespace(session_hash=session))
        return undone[self.report]


@pytest.fixture()
def page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tab:
    monkeypatch.setattr(thumbnails, "THUMBS", tmp_path / "thumbs")
    return Tab()


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    return captioned_images(tmp_path / "data" / "5_sks fox", side=64)


def test_a_job_that_ends_with_no_dataset_open_leaves_the_tab_as_it_is(page: Tab) -> None:
    """It raised "didn't return enough output values" in gradio (the GUI log's on_reload ValueError)."""
    sent = page.reloaded("")
    shown = [value for block, value in sent.items() if not block.stateful]
    assert shown and all(value == gr.skip() for value in shown)


def test_a_job_that_ends_shows_the_open_dataset_again(page: Tab, dataset: Path) -> None:
    (dataset / "5_sks fox" / "a.txt").write_text("fox a, by the job", encoding="utf-8")
    sent = page.reloaded(dataset)
    gallery = sent[page.tab.gallery]
    assert [item["caption"] for item in gallery] == ["fox a, by the job", "fox b"]
    assert "2 image(s)" in sent[page.tab.status]


def test_save_refuses_a_caption_box_older_than_its_file_and_takes_it_once_picked_again(page: Tab,
                                                                                      dataset: Path) -> None:
    image = dataset / "5_sks fox" / "a.png"
    picked = page.select(image)
    assert picked["caption"] == "fox a"
    image.with_suffix(".txt").write_text("fox a, by a caption job", encoding="utf-8")
    refused = page.save("A", picked, "fox a, typed")[page.report]
    assert refused.startswith("### Not done") and "'fox a, by a caption job'" in refused
    assert "pick the image" in refused
    assert image.with_suffix(".txt").read_text(encoding="utf-8") == "fox a, by a caption job"
    picked = page.select(image)
    saved = page.save("A", picked, "fox a, typed")
    assert saved[page.report] == "Saved the caption of a.png."
    kept = saved[page.loaded] or picked["loaded"]  # a State the handler does not set keeps its value
    again = page.save("A", {**picked, "loaded": kept}, "fox a, typed twice")  # typed on, no pick between
    assert again[page.report] == "Saved the caption of a.png."
    assert image.with_suffix(".txt").read_text(encoding="utf-8") == "fox a, typed twice"


def test_undo_in_one_browser_session_leaves_another_sessions_edit(page: Tab, dataset: Path) -> None:
    a, b = dataset / "5_sks fox" / "a.png", dataset / "5_sks fox" / "b.png"
    page.save("A", page.select(a), "fox a, A's")
    page.save("B", page.select(b), "fox b, B's")
    assert page.undo("A", dataset) == "Undid: edit a.png."
    assert "nothing of yours to undo: the newest edit (edit b.png" in page.undo("A", dataset)
    assert [p.read_text(encoding="utf-8") for p in (a.with_suffix(".txt"), b.with_suffix(".txt"))] == [
        "fox a", "fox b, B's"]


def test_statistics_name_the_checks_and_their_fixes_undo(page: Tab, dataset: Path) -> None:
    fox = dataset / "5_sks fox"
    (fox / "twin.png").write_bytes((fox / "a.png").read_bytes())
    (fox / "b.txt").write_bytes("fox b, caf\xe9".encode("cp1252"))
    stats = next(b for b in page.blocks.blocks.values() if getattr(b, "elem_id", None) == "dataset-stats-report")
    shown = page.call("on_stats", str(dataset), ".txt", "64", True, 75, "")[stats]
    named = {name: plain(f"5_sks fox/{name}") for name in ("a.png", "b.png", "twin.png")}
    assert f"1 group(s) of exact duplicates** (the same bytes; *Move duplicates aside* keeps the first of each):\n" \
           f"  - {named['a.png']}, {named['twin.png']}" in shown
    assert "1 caption file(s) not plain UTF-8** (sd-scripts" in shown and named["b.png"] in shown
    assert "empty caption" not in shown  # twin.png has no caption file: it trains with the folder's 'sks fox'
    session = SimpleNamespace(session_hash="A")
    moved = page.call("on_set_aside", str(dataset), ".txt", dataset_tab.ALL, "", True, session)
    assert "Moved aside: set aside 1" in moved[stats] and not (fox / "twin.png").exists()
    assert [item["caption"] for item in moved[page.tab.gallery]] == ["fox a", "fox b, café"]
    resaved = page.call("on_resave", str(dataset), ".txt", dataset_tab.ALL, "", session)
    assert "re-save 1 caption file(s) as UTF-8" in resaved[stats]
    assert (fox / "b.txt").read_bytes() == "fox b, café".encode("utf-8")
    assert page.undo("A", dataset).startswith("Undid: re-save")
    assert page.undo("A", dataset).startswith("Undid: set aside")
    assert (fox / "twin.png").read_bytes() == (fox / "a.png").read_bytes()
    assert (fox / "b.txt").read_bytes() == "fox b, caf\xe9".encode("cp1252")
