"""A caption job and the Dataset tab's bulk edits on one dataset: the job writes each caption holding the dataset
folder's edit lock, so it waits out an edit being written, and an edit it keeps out names the job."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import trainers.caption.run as caption_run
import trainers.dataset_edit.lock as lock
from image_files import captioned_images
from trainers.caption.job import ImageJob
from trainers.caption.options import config_from_values
from trainers.dataset_edit.edits import preview, write_changes
from trainers.dataset_edit.folders import DatasetEditError, open_dataset
from trainers.dataset_edit.tags import BulkOp


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return captioned_images(tmp_path / "data" / "5_fox")


def _caption_job(images: Path, job_dir: Path, monkeypatch: pytest.MonkeyPatch) -> ImageJob:
    """A caption job (append) whose captioner answers 'new' for every image (no model is loaded)."""
    monkeypatch.setattr(caption_run, "load_captioner", lambda job: lambda pils: ["new" for _ in pils])
    cfg = config_from_values("caption", {"images": str(images), "model": str(job_dir.parent), "device": "cpu",
                                         "existing": "append"})
    return ImageJob(cfg, job_dir)


def test_a_job_on_a_concept_folder_locks_the_dataset_the_tab_opens(data: Path) -> None:
    assert caption_run.lock_folder(data / "5_fox") == data  # the Dataset tab opens a kohya dataset at its parent
    assert caption_run.lock_folder(data) == data


def test_a_caption_job_waits_for_a_bulk_edit_being_written_and_keeps_its_caption(
        data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _caption_job(data / "5_fox", tmp_path / "runs" / "job", monkeypatch)
    held, release = threading.Event(), threading.Event()

    def bulk_edit() -> None:  # a session's edit, written while it holds the lock
        dataset = open_dataset(data)
        with lock.edit_lock(dataset):
            held.set()
            release.wait(5)
            for name in "ab":
                (data / "5_fox" / f"{name}.txt").write_text(f"sks, fox {name}", encoding="utf-8")

    thread = threading.Thread(target=bulk_edit)
    thread.start()
    held.wait(5)
    ran: list[Any] = []
    job_thread = threading.Thread(target=lambda: ran.append(caption_run.run(job.cfg, job)))
    job_thread.start()
    time.sleep(0.5)
    assert (data / "5_fox" / "a.txt").read_text(encoding="utf-8") == "fox a"  # the job waits for the edit
    release.set()
    thread.join()
    job_thread.join(30)
    assert ran, "the caption job did not end"
    for name in "ab":  # appended to the edit's caption: neither is lost
        assert (data / "5_fox" / f"{name}.txt").read_text(encoding="utf-8") == f"sks, fox {name} new\n"


def test_a_bulk_edit_kept_out_by_a_caption_job_names_the_job(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lock, "LOCK_WAIT_S", 0.2)
    held, release = threading.Event(), threading.Event()

    def job_writing() -> None:
        with lock.folder_lock(data, holder="the caption job 20260101-caption-5_fox"):
            held.set()
            release.wait(5)

    thread = threading.Thread(target=job_writing)
    thread.start()
    held.wait(5)
    dataset = open_dataset(data)
    try:
        with pytest.raises(DatasetEditError, match="the caption job 20260101-caption-5_fox is writing captions in "
                                                   f"{data}; nothing was changed"):
            write_changes(dataset, preview(dataset, BulkOp("trigger", "sks")), "trigger")
    finally:
        release.set()
        thread.join()
    assert (data / "5_fox" / "a.txt").read_text(encoding="utf-8") == "fox a"
    write_changes(dataset, preview(dataset, BulkOp("trigger", "sks")), "trigger")  # the job ended: written
    assert (data / "5_fox" / "a.txt").read_text(encoding="utf-8") == "sks, fox a"
