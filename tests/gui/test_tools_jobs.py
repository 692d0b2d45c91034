"""Tools jobs beside a training run: inspect, resize, LoRA merges and LoRA conversions start at once (they hold no
device, so they do not hold up a run either); a merge into a model, which loads whole models, waits in the run queue
and starts by itself when the device frees. A folder a tool wrote (a merged diffusers model) downloads as a zip."""
from __future__ import annotations

import json
import os
import time
import zipfile
from pathlib import Path

import pytest

from gui import jobs as jobs_module
from gui.jobs import JobManager
from gui.run_queue import RunQueue
from gui.tools_tab import ToolView, downloads, zip_folders
from gui.transfers import TransferError
from trainers.core import lifecycle
from trainers.core.rundir import read_status, update_status
from trainers.tools.options import config_from_values


@pytest.fixture
def queue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunQueue:
    """A run queue on a CPU-only machine whose launches record themselves (no process starts), with a training run
    active on the CPU."""
    monkeypatch.setattr(jobs_module, "gpu_count", lambda: 0)
    manager = JobManager(tmp_path / "runs")

    def launch(run_dir: Path, command: list[str], ids: str, **status: object) -> None:
        lifecycle.launched(run_dir, os.getpid(), gpu_ids=ids, **status)
        update_status(run_dir, pgid=os.getpgrp(), state="running")  # alive: this test's process group
        (run_dir / "launched.json").write_text(json.dumps(command))

    monkeypatch.setattr(manager, "_launch_job", launch)
    run = tmp_path / "runs" / "lora-demo"
    run.mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({
        "state": "running", "method": "lora", "num_processes": 1, "pgid": os.getpgrp(), "launcher_pid": os.getpid(),
        "trainer_pid": os.getpid(), "created": time.time()}))
    return RunQueue(manager)


def _lora(tmp_path: Path) -> Path:
    import torch
    from safetensors.torch import save_file

    name = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q"
    path = tmp_path / "my lora.safetensors"
    save_file({f"{name}.lora_down.weight": torch.ones(4, 32), f"{name}.lora_up.weight": torch.ones(32, 4),
               f"{name}.alpha": torch.tensor(4.0)}, path)
    return path


def test_light_tools_jobs_start_beside_a_run_and_do_not_hold_it_up(queue: RunQueue, tmp_path: Path) -> None:
    lora = _lora(tmp_path)
    started = []
    for verb, values in (("inspect", {"file": str(lora)}), ("resize", {"lora": str(lora), "device": "cpu"}),
                         ("merge", {"loras": [str(lora)], "device": "cpu"}), ("convert", {"input": str(lora)})):
        job_dir, said = queue.submit_tool(config_from_values(verb, values))
        assert said == f"Started tools {verb} `{job_dir.name}`", said
        assert json.loads((job_dir / "launched.json").read_text()) == ["tools", verb]
        started.append(job_dir)
    assert set(queue.jobs.active_runs()) == {*started, queue.jobs.runs_dir / "lora-demo"}
    run = queue.jobs.runs_dir / "lora-demo"
    assert queue.jobs.busy_with({"cpu"}) == run  # the training run, and none of the four jobs running beside it


def test_a_merge_into_a_model_waits_in_the_queue_and_starts_when_the_run_ends(queue: RunQueue,
                                                                               tmp_path: Path) -> None:
    lora = _lora(tmp_path)
    cfg = config_from_values("merge", {"model": str(tmp_path / "base model"), "loras": [str(lora)], "device": "cpu"})
    job_dir, said = queue.submit_tool(cfg)
    assert said.startswith(f"Queued `{job_dir.name}` (position 1): it starts by itself when run `lora-demo` is done")
    assert "tools merge loads whole models, so it waits for the device" in said
    assert read_status(job_dir)["state"] == "queued" and not (job_dir / "launched.json").exists()
    assert queue.start_ready() == []
    run = queue.jobs.runs_dir / "lora-demo"
    (run / "status.json").write_text(json.dumps({**json.loads((run / "status.json").read_text()),
                                                 "state": "finished"}))
    assert queue.start_ready() == [job_dir]
    assert json.loads((job_dir / "launched.json").read_text()) == ["tools", "merge"]
    assert read_status(job_dir)["verb"] == "merge" and read_status(job_dir)["gpu_ids"] == "cpu"


def test_a_folder_output_downloads_as_a_zip_of_the_folder(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    job_dir = runs / "tools-merge-x"
    model = job_dir / "base model-merged"
    for part, data in (("model_index.json", b"{}"), ("unet/diffusion_pytorch_model.safetensors", b"\0" * 64)):
        (model / part).parent.mkdir(parents=True, exist_ok=True)
        (model / part).write_bytes(data)
    report = job_dir / "report.md"
    report.write_text("# merged")
    view = ToolView("tools-merge-x", outputs=[(str(model), "model"), (str(report), "report")])
    assert downloads(view, job_dir, runs) == [str(report)]  # a folder cannot be served as it is
    zip_folders(view, job_dir)
    offered = downloads(view, job_dir, runs)
    assert offered[-1] == str(report) and offered[0].endswith("base model-merged.zip")
    with zipfile.ZipFile(offered[0]) as archive:
        assert sorted(archive.namelist()) == ["base model-merged/model_index.json",
                                              "base model-merged/unet/diffusion_pytorch_model.safetensors"]
        assert archive.read("base model-merged/unet/diffusion_pytorch_model.safetensors") == b"\0" * 64
    with pytest.raises(TransferError, match="wrote no folder"):
        zip_folders(ToolView("y", outputs=[(str(report), "report")]), job_dir)
