"""A caption or mask job started while a training run holds the device waits in the run queue: the tab says what it
waits behind, it survives a GUI restart, Stop takes it out of the queue, and it starts by itself when the device
frees."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gui.caption_tab import CaptionWatcher, status_text
from gui.jobs import JobError, JobManager
from gui.run_queue import RunQueue
from helpers import stand_in_python, wait_until
from trainers.caption.options import config_from_values
from trainers.core.options import TrainConfig
from trainers.core.rundir import read_status


def test_caption_jobs_queue_behind_a_run_and_start_when_it_ends(tmp_path: Path, images: Path) -> None:
    jobs = JobManager(tmp_path / "runs", python=str(stand_in_python(tmp_path, until_released=True)))
    queue = RunQueue(jobs)
    run, _ = queue.submit(TrainConfig("lora", {"max_train_steps": 1, "gpu_ids": "0"}))
    wait_until(lambda: (run / "argv.json").exists(), "the training run to start")
    with pytest.raises(JobError, match=f"Run {run.name} is still active"):  # started without the queue: refused
        jobs.start_dataset_job(config_from_values("caption", {"images": str(images), "device": "cuda:0"}))

    caption = config_from_values("caption", {"images": str(images), "device": "cuda:0", "trigger_word": "sks"})
    job, said = queue.submit_dataset_job(caption)
    assert f"run `{run.name}`" in said and "position 1" in said
    masks, _ = queue.submit_dataset_job(config_from_values("masks", {"images": str(images), "device": "cuda:0"}))
    view = CaptionWatcher(job).refresh()
    shown = status_text(view, queue.waits_for(job))
    assert shown.startswith(f"### Queued: caption `{job.name}`")
    assert f"queued behind `{run.name}` (running)" in shown and "GPU 0" in shown and "Stop" in shown
    assert f"behind `{job.name}` (queued)" in status_text(CaptionWatcher(masks).refresh(), queue.waits_for(masks))

    restarted = RunQueue(JobManager(tmp_path / "runs", python=jobs.python))  # a page refresh or GUI restart
    assert restarted.queued() == [job, masks]
    restarted.cancel(masks)  # the tab's Stop on a queued job
    assert read_status(masks)["state"] == "stopped" and "removed from the queue" in read_status(masks)["message"]
    assert restarted.start_ready() == []  # the run still holds GPU 0

    restarted.run_scheduler(every_s=0.1)
    (run / "release").touch()
    wait_until(lambda: (job / "argv.json").exists(), "the queued caption job to start")
    argv = json.loads((job / "argv.json").read_text())
    assert argv[:4] == ["-m", "trainers", "caption", "--config"] and argv[-1] == str(job)
    status = read_status(job)
    assert status["method"] == "caption" and status["verb"] == "caption" and status["gpu_ids"] == "0"
    (job / "release").touch()
    time.sleep(0.3)
    assert not (masks / "argv.json").exists()  # cancelled: never started
