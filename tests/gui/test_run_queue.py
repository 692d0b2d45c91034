"""Start while the GPUs are busy queues the run; the queue is reordered, cancelled, survives a restart and starts
the next run by itself when the GPUs free up."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gui.jobs import JobError, JobManager
from gui.run_queue import RunQueue
from helpers import stand_in_python, wait_until
from trainers.core.options import TrainConfig
from trainers.core.rundir import read_status


def test_busy_gpus_queue_runs_that_start_in_order_by_themselves(tmp_path: Path) -> None:
    jobs = JobManager(tmp_path / "runs", python=str(stand_in_python(tmp_path, until_released=True)))
    queue = RunQueue(jobs)
    cfg = TrainConfig("lora", {"max_train_steps": 1})
    first, said = queue.submit(cfg.replace(output_name="first"))
    assert said.startswith("Started") and read_status(first)["state"] != "queued"
    wait_until(lambda: (first / "argv.json").exists(), "the first run to start")
    second, said = queue.submit(cfg.replace(output_name="second"))
    assert f"run `{first.name}`" in said and "position 1" in said
    third, said = queue.submit(cfg.replace(output_name="third"))
    assert "position 2" in said
    cancelled, _ = queue.submit(cfg.replace(output_name="cancelled"))
    assert queue.queued() == [second, third, cancelled]

    queue.move(third, -1)
    assert queue.queued() == [third, second, cancelled]
    queue.cancel(cancelled)
    assert read_status(cancelled)["state"] == "stopped" and "removed from the queue" in read_status(cancelled)["message"]
    with pytest.raises(JobError, match="not queued"):
        queue.cancel(first)
    assert queue.start_ready() == []  # the machine is busy with the first run

    restarted = RunQueue(JobManager(tmp_path / "runs", python=jobs.python))  # a GUI restart finds its queue
    assert restarted.queued() == [third, second]
    restarted.run_scheduler(every_s=0.1)
    (first / "release").touch()
    wait_until(lambda: (third / "argv.json").exists(), "the queue to start the next run")
    assert read_status(second)["state"] == "queued"  # one at a time on the same GPUs
    assert json.loads((third / "argv.json").read_text())[-1] == str(third)
    (third / "release").touch()
    wait_until(lambda: (second / "argv.json").exists(), "the run after it")
    (second / "release").touch()
    assert not (cancelled / "argv.json").exists()


@pytest.mark.parametrize("listed, hidden, expected", [
    (None, None, "for the CPU"),  # no nvidia-smi: a CPU-only machine
    ("", None, "for the CPU"),  # nvidia-smi without a GPU (a driver but no device)
    ("GPU 0: NVIDIA H100 (UUID: GPU-1)\nGPU 1: NVIDIA H100 (UUID: GPU-2)\n", None, "for GPU 0, 1"),
    ("GPU 0: NVIDIA H100 (UUID: GPU-1)\n", "", "for the CPU"),  # CUDA_VISIBLE_DEVICES="" hides it
], ids=["no-nvidia-smi", "no-gpu", "two-gpus", "hidden"])
def test_a_queued_run_names_the_devices_it_waits_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      listed: str | None, hidden: str | None, expected: str) -> None:
    from gui import jobs
    from gui.run_files import RunWatcher
    from gui.run_panel import render

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if listed is not None:  # an nvidia-smi that lists these GPUs
        (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\nprintf '%s' '{listed}'\n", encoding="utf-8")
        (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    if hidden is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
    jobs.gpu_count.cache_clear()
    try:
        run = tmp_path / "run"
        run.mkdir()
        (run / "status.json").write_text(json.dumps({"state": "queued", "method": "lora", "num_processes": 2}))
        stats = render(RunWatcher(run).refresh())[2][1]
    finally:
        jobs.gpu_count.cache_clear()
    assert f"Waiting in the queue {expected} " in stats
    assert ("GPU" in stats) == ("GPU 0" in expected)


@pytest.mark.parametrize(("method", "said"), [("generate", "on the **Generate** tab"), ("tools", "on the **Tools** tab")])
def test_the_run_panel_sends_a_job_to_the_tab_that_shows_it(tmp_path: Path, method: str, said: str) -> None:
    from gui.run_files import RunWatcher
    from gui.run_panel import render

    run = tmp_path / f"{method}-job"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "finished", "method": method}))
    assert said in render(RunWatcher(run).refresh())[2][1]
