"""A video family's samples are mp4 clips: the run panel's gallery plays them beside image samples."""
from __future__ import annotations

import json
import os
from pathlib import Path

import gui.run_panel as run_panel
from gui.run_files import RunWatcher
from tests.data.test_video_clips import write_clip
from trainers.core import events as ev


def test_the_run_panel_gallery_plays_a_runs_mp4_samples(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "samples").mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({"state": "running", "launcher_pid": os.getpid(), "method": "lora"}))
    clip = write_clip(run / "samples" / "step00000002-0.mp4", frames=9, fps=16)
    writer = ev.EventWriter(run)
    writer.emit(ev.Sample(path=str(clip), prompt="a fox walks", step=2, epoch=1, index=0))
    pairs = run_panel.render(RunWatcher(run).refresh())
    gallery = next(value for key, value in pairs if isinstance(value, run_panel.gr.Gallery))
    shown = gallery.postprocess(gallery.constructor_args["value"]).root
    assert gallery.constructor_args["visible"] and len(shown) == 1
    assert shown[0].video is not None and shown[0].video.mime_type == "video/mp4"
