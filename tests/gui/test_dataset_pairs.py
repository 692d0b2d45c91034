"""The Dataset tab's pair view: an edit dataset's targets beside their controls and captions, what does not pair up
listed first by name, and control folders outside the allowed roots refused."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest
from PIL import Image

import gui.thumbnails as thumbnails
from gui.dataset_pairs import pair_view
from trainers.dataset_edit.folders import open_dataset

RED, BLUE = (220, 20, 20), (20, 20, 220)


def _image(path: Path, colour: tuple[int, int, int], size: tuple[int, int] = (64, 48)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path)


@pytest.fixture()
def edit_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """targets/ with controls/ (musubi-tuner's key) and a second subset with sd-scripts' conditioning_data_dir."""
    monkeypatch.setattr(thumbnails, "THUMBS", tmp_path / "thumbs")
    for name in ("a", "b", "c", "d", "f"):
        _image(tmp_path / "targets" / f"{name}.png", BLUE)
    (tmp_path / "targets" / "a.txt").write_text("make the sky blue", encoding="utf-8")
    (tmp_path / "targets" / "d.png").write_bytes(b"not an image")
    _image(tmp_path / "controls" / "a.jpg", RED)
    _image(tmp_path / "controls" / "b_0.png", RED)
    _image(tmp_path / "controls" / "b_1.png", RED)
    _image(tmp_path / "controls" / "d.png", RED)
    _image(tmp_path / "controls" / "zzz.png", RED)  # no target of that name
    for i in range(4):  # more references than any edit model takes
        _image(tmp_path / "controls" / f"f_{i}.png", RED)
    _image(tmp_path / "more" / "g.png", BLUE)
    _image(tmp_path / "more_controls" / "g.png", RED)
    toml = tmp_path / "edit.toml"
    toml.write_text('[[datasets]]\n[[datasets.subsets]]\nimage_dir = "targets"\ncontrol_directory = "controls"\n'
                    '[[datasets.subsets]]\nimage_dir = "more"\nconditioning_data_dir = "more_controls"\n',
                    encoding="utf-8")
    return toml


def test_pairs_are_shown_side_by_side_with_mismatches_first(edit_dataset: Path) -> None:
    view = pair_view(open_dataset(edit_dataset))
    problems, pairs = view.text.split("pair(s)**", 1)[0], view.text
    assert problems.startswith("**") and "problem(s)" in problems
    assert "c.png" in problems and "no control image" in problems  # a target without its control
    assert "d.png" in problems and "skipped" in problems  # an unreadable target: its pair skipped
    assert "zzz.png" in problems and "match no target" in problems  # an unused control
    assert "f.png" in problems and "more control images" in problems  # four references
    assert "**4 pair(s)**" in pairs  # a, b, f and the other subset's g
    captions = sorted(caption for _, caption in view.rows)
    assert captions == ["a.jpg → a.png: make the sky blue", "b_0.png, b_1.png → b.png: (no caption)",
                        "f_0.png, f_1.png, f_2.png, f_3.png → f.png: (no caption)", "g.png → g.png: (no caption)"]
    b_row = next(thumb for thumb, caption in view.rows if caption.startswith("b_0"))
    with Image.open(b_row) as row:
        drawn = row.convert("RGB")
    assert drawn.width > 3 * 64 and drawn.height == 48  # two controls then the target, side by side
    assert drawn.getpixel((10, 24)) == pytest.approx(RED, abs=12)  # a control first
    assert drawn.getpixel((drawn.width - 10, 24)) == pytest.approx(BLUE, abs=12)  # the target last


def test_a_dataset_without_control_folders_says_how_to_name_them(tmp_path: Path) -> None:
    _image(tmp_path / "flat" / "x.png", BLUE)
    view = pair_view(open_dataset(tmp_path / "flat"))
    assert view.rows == [] and "control_directory" in view.text


def test_the_tab_refuses_control_folders_outside_the_allowed_roots(edit_dataset: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from gui.dataset_tab import build_dataset_tab

    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    (tmp_path / "controls").rename(outside)
    edit_dataset.write_text(edit_dataset.read_text().replace('"controls"', f'"{outside}"'), encoding="utf-8")
    with gr.Blocks() as blocks:
        build_dataset_tab(SimpleNamespace(allowed_roots=[tmp_path]))
    on_pairs = next(f.fn for f in blocks.fns.values() if f.name == "on_pairs")
    text, _ = on_pairs(str(edit_dataset), ".txt", "")
    assert "Not checked" in text and str(outside) in text and "--allowed-root" in text
    text, _ = on_pairs(str(tmp_path / "targets"), ".txt", str(outside))  # typed in the tab's own field
    assert "Not checked" in text and str(outside) in text


def test_colour_controls_in_conditioning_data_dir_are_not_shown_as_masks(edit_dataset: Path) -> None:
    """sd-scripts' key names an edit model's controls too: the gallery tints an image only under a grey mask."""
    from gui.dataset_tab import gallery_items

    captions = [caption for _, caption in gallery_items(edit_dataset)]
    assert captions and not any(caption.endswith("· masked") for caption in captions)


def test_a_kohya_folder_pairs_with_a_control_folder_laid_out_like_it(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's flat options (train_data_dir with control_directory): the controls of `10_sks/x.png` are in
    `<controls>/10_sks/`, as training reads them."""
    monkeypatch.setattr(thumbnails, "THUMBS", tmp_path / "thumbs")
    _image(tmp_path / "data" / "10_sks" / "x.png", BLUE)
    _image(tmp_path / "data" / "10_sks" / "y.png", BLUE)
    _image(tmp_path / "controls" / "10_sks" / "x.png", RED)
    view = pair_view(open_dataset(tmp_path / "data"), tmp_path / "controls")
    assert [caption for _, caption in view.rows] == ["x.png → x.png: (no caption)"]
    assert "y.png" in view.text.split("**1 pair(s)**")[0]  # its missing control, named first
