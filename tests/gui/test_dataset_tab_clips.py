"""The Dataset tab on a folder of video clips: each clip shown by its first frame with its duration, rate, frame
count and the frames a video run takes; its caption edited like an image's; a broken clip named, never fatal."""
from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

import gui.dataset_tab as dataset_tab
import gui.thumbnails as thumbnails
from tests.data.test_video_clips import write_clip
from trainers.dataset_edit.edits import caption_edit, write_changes
from trainers.dataset_edit.folders import open_dataset


@pytest.fixture()
def clips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(thumbnails, "THUMBS", tmp_path / "thumbs")
    folder = tmp_path / "clips ü"
    folder.mkdir()
    write_clip(folder / "walk.mp4", frames=40, fps=16, size=(48, 32))
    (folder / "walk.txt").write_text("a fox walks", encoding="utf-8")
    write_clip(folder / "blink.mp4", frames=3, fps=8)
    (folder / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"\x00" * 40)
    Image.new("RGB", (32, 32), (200, 10, 10)).save(folder / "still.png")
    return folder


def test_clips_show_their_first_frame_rate_frames_and_the_window_a_run_takes(clips: Path) -> None:
    dataset = open_dataset(clips)
    rows = dict(dataset_tab.gallery_items(clips))
    walk = next(caption for caption in rows.values() if caption.startswith("a fox walks"))
    assert "2.5 s at 16 fps, 40 frames, 48x32" in walk and "takes frames 0 " in walk  # musubi's default: 1 frame
    with Image.open(next(t for t, c in rows.items() if c == walk)) as poster:
        assert poster.size == (48, 32) and abs(poster.convert("L").getpixel((24, 16)) - 0) < 12  # frame 0 is black
    assert any(caption.startswith("(no caption") and "3 frames" in caption for caption in rows.values())
    summary = dataset_tab.summary(dataset, len(rows))
    assert "1 image(s) and 2 video clip(s)" in summary
    assert "broken.mp4" in summary  # named as unreadable, the rest shown


def test_a_video_dataset_toml_says_which_frames_each_window_takes(clips: Path) -> None:
    config = clips.parent / "video.toml"
    config.write_text(f'[general]\nresolution = [48, 32]\n[[datasets]]\nvideo_directory = "{clips.as_posix()}"\n'
                      'target_frames = [1, 17, 33]\nframe_extraction = "chunk"\n', encoding="utf-8")
    rows = [caption for _, caption in dataset_tab.gallery_items(config)]
    walk = next(caption for caption in rows if caption.startswith("a fox walks"))
    assert "takes frames 0, 1, 2 and " in walk and "chunk" in walk
    assert "target_frames [1, 17, 33]" in walk
    blink = next(caption for caption in rows if "3 frames" in caption)
    assert "takes frames 0, 1, 2 (3 window(s)" in blink  # only 1-frame windows fit a 3-frame clip


def test_a_clips_caption_is_edited_like_an_images(clips: Path) -> None:
    dataset = open_dataset(clips)
    write_changes(dataset, caption_edit(dataset, clips / "walk.mp4", "a fox walks, snow"), "caption")
    assert (clips / "walk.txt").read_text(encoding="utf-8") == "a fox walks, snow"
    assert open_dataset(clips).entry(clips / "walk.mp4").caption == "a fox walks, snow"
