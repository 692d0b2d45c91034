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
from image_files import save_image


class Tab:
    """The Dataset tab built in a page of its own, its handlers run through gradio's postprocessing."""

    def __init__(self) -> None:
        with gr.Blocks() as self.blocks:
            self.tab = dataset_tab.build_dataset_tab(SimpleNamespace(allowed_roots=None))

    def call(self, wanted: Callable[[Any], bool], *args: Any) -> dict[Any, Any]:
        """The handler's outputs, by component, as gradio sends them to the page (gr.skip(): left as they are)."""
        block_fn = next(f for f in self.blocks.fns.values() if wanted(f))
        sent = asyncio.run(self.blocks.postprocess_data(block_fn, block_fn.fn(*args), None))
        return dict(zip(block_fn.outputs, sent))

    def reloaded(self, folder: str | Path) -> dict[Any, Any]:
        """What the page gets when a caption or mask job ends (the Captions tab sets the Dataset tab's reload)."""
        return self.call(lambda f: (self.tab.reload._id, "change") in f.targets,
                         str(folder), ".txt", dataset_tab.ALL, "")


@pytest.fixture()
def page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tab:
    monkeypatch.setattr(thumbnails, "THUMBS", tmp_path / "thumbs")
    return Tab()


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    folder = tmp_path / "data" / "5_sks fox"
    for name in ("a", "b"):
        save_image(folder / f"{name}.png", (64, 64), seed=ord(name))
        (folder / f"{name}.txt").write_text(f"fox {name}", encoding="utf-8")
    return folder.parent


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
