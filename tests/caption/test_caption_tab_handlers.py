"""The Captions & masks tab's handlers, called as the page calls them (no browser): a job that ends shows the Dataset
tab's open dataset again with its new captions; a queued job says what it waits behind and Stop takes it out of the
queue."""
from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import gradio as gr
import pytest

import gui.dataset_tab as dataset_tab
import gui.thumbnails as thumbnails
from gui.caption_tab import build_caption_tab
from gui.jobs import JobManager
from gui.run_queue import RunQueue
from helpers import stand_in_python
from trainers.caption.cli import _run
from trainers.caption.options import config_from_values
from trainers.core.lifecycle import job_started
from trainers.core.options import TrainConfig

SKIPPED = gr.skip()


class Page:
    """The Dataset and Captions & masks tabs built as the page builds them, with their handlers at hand."""

    def __init__(self, services: Any) -> None:
        with gr.Blocks() as self.blocks:
            self.dataset = dataset_tab.build_dataset_tab(services)
            build_caption_tab(services, self.dataset)
        self.tick = self.handler(lambda f: f.name == "tick" and self.dataset.reload in f.outputs)
        self.stop = self.handler(lambda f: f.name == "on_stop")
        self.reload = self.handler(lambda f: (self.dataset.reload._id, "change") in f.targets)
        self.open = self.handler(lambda f: f.name == "on_open")

    def handler(self, wanted: Callable[[Any], bool]) -> Callable[..., Any]:
        found = [f for f in self.blocks.fns.values() if wanted(f)]
        assert len(found) >= 1
        return found[0].fn

    def ticked(self, job_id: str, until: str = "") -> dict[str, Any]:
        """What a timer tick sends to the page for the job `job_id` shows (the ticks of the next seconds, until its
        status says `until`: a job folder is read at most twice a second)."""
        deadline = time.monotonic() + 5
        while True:
            job, status, _results, _previews, _report, reload, _shown = self.tick(job_id, None)
            if until in status or time.monotonic() > deadline:
                return {"job": job, "status": status, "reload": reload}
            time.sleep(0.1)

    def captions(self, dataset: Path, reload_value: str) -> list[str]:
        shown = self.reload(str(dataset), ".txt", dataset_tab.ALL, "") if reload_value != SKIPPED else {}
        return [caption for _, caption in shown.get(self.dataset.gallery, [])]


@pytest.fixture()
def page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Page, Any]:
    monkeypatch.setattr(thumbnails, "THUMBS", tmp_path / "thumbs")
    jobs = JobManager(tmp_path / "runs", python=str(stand_in_python(tmp_path, until_released=True)))
    services = SimpleNamespace(runs_dir=jobs.runs_dir, jobs=jobs, queue=RunQueue(jobs), allowed_roots=None)
    return Page(services), services


def test_a_finished_caption_job_shows_the_open_dataset_again_with_its_captions(
        page: tuple[Page, Any], images: Path, tiny_tagger: Path) -> None:
    tab, services = page
    opened = tab.open(str(images), ".txt", dataset_tab.ALL, "")
    assert [c for _, c in opened[tab.dataset.gallery]][0].startswith("(no caption")

    cfg = config_from_values("caption", {"images": str(images), "model": str(tiny_tagger), "device": "cpu"})
    job_dir = services.runs_dir / "caption-job"
    life = job_started(job_dir, cfg, method="caption", verb="caption")
    running = tab.ticked(job_dir.name)
    assert running["reload"] == SKIPPED  # a running job: the gallery is left as it is
    life.finished(str(job_dir), _run(cfg, job_dir, life.events))
    ended = tab.ticked(job_dir.name, until="Finished")
    assert ended["reload"] != SKIPPED and "Finished" in ended["status"]
    captions = tab.captions(images, ended["reload"])
    assert captions[0].strip() == "red background, ^_^" and not any(c.startswith("(no caption") for c in captions)
    assert tab.ticked(job_dir.name)["reload"] == ended["reload"]  # the same value: no second reload


def test_a_queued_job_says_what_it_waits_behind_and_stop_takes_it_out(page: tuple[Page, Any], images: Path) -> None:
    tab, services = page
    run, _ = services.queue.submit(TrainConfig("lora", {"max_train_steps": 1, "gpu_ids": "0"}))
    job, said = services.queue.submit_dataset_job(config_from_values("caption", {"images": str(images),
                                                                                 "device": "cuda:0"}))
    assert "Queued" in said
    queued = tab.ticked(job.name)
    assert f"queued behind `{run.name}`" in queued["status"] and queued["reload"] == SKIPPED
    assert "out of the queue" in tab.stop(job.name)
    assert tab.ticked(job.name, until="### Stopped")["reload"] != SKIPPED
    (run / "release").touch()


def test_a_mask_job_over_a_dataset_toml_naming_folders_outside_the_allowed_roots_is_refused(
        tmp_path: Path) -> None:
    from gui.caption_tab import _outside_roots

    outside = tmp_path.parent / f"{tmp_path.name}-masks-elsewhere"
    outside.mkdir(exist_ok=True)
    (tmp_path / "photos").mkdir()
    toml = tmp_path / "dataset.toml"
    toml.write_text(f'[[datasets]]\n[[datasets.subsets]]\nimage_dir = "photos"\nconditioning_data_dir = "{outside}"\n',
                    encoding="utf-8")
    cfg = config_from_values("masks", {"images": str(toml), "prompt": "a thing"})
    refused = _outside_roots(cfg, [tmp_path])
    assert [issue.field for issue in refused] == ["images"] and str(outside) in refused[0].message
    assert _outside_roots(cfg, None) == []
