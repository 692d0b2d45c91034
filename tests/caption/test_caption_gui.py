"""What the Captions & masks tab shows of a job, read back from a real job's folder (a tiny tagger's job)."""
from __future__ import annotations

from pathlib import Path

from gui.caption_tab import CaptionWatcher, resume_values, results_text, status_text
from trainers.caption.cli import _run
from trainers.caption.options import config_from_values
from trainers.core.lifecycle import job_started


def test_a_finished_job_shows_counts_rate_captions_and_report(images: Path, tiny_tagger: Path, tmp_path: Path) -> None:
    (images / "10_sks" / "99_broken.png").write_bytes(b"not an image")
    cfg = config_from_values("caption", {"images": str(images), "model": str(tiny_tagger), "device": "cpu",
                                         "trigger_word": "sks"})
    job_dir = tmp_path / "runs" / "job"
    life = job_started(job_dir, cfg, method="caption", verb="caption")
    life.finished(str(job_dir), _run(cfg, job_dir, life.events))
    view = CaptionWatcher(job_dir).refresh()
    status = status_text(view)
    assert "Finished: caption" in status and "**5 / 5** images" in status and "images/s" in status
    assert "1 unreadable" in status and "99_broken.png" in status  # the warning names it
    assert "| `00_red.png` | sks, red background, ^&#95;^ |" in results_text(view)  # shown as ^_^, not as markdown
    assert "4 of 5 images got their captions" in view.report
    again = resume_values(job_dir)
    assert again["verb"] == "caption" and again["resume"] == str(job_dir) and again["trigger_word"] == "sks"
