"""`app.py --demo` while its demo model is still being prepared: the page says how far the build is, Validate and
Start take a demo config, and its run waits in the queue until the model is there; the Generate tab opens on the
demo's model, prompts and newest LoRA."""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from gui.run_files import RunWatcher
from gui.run_panel import render
from gui.demo_build import DemoBuild, DemoQueue, check_start
from gui.generate_tab import demo_values
from gui.jobs import JobManager
from gui.presets import Presets
from helpers import stand_in_python, wait_until
from trainers.core.options import TrainConfig
from trainers.core.rundir import read_status
from trainers.demo import BUILT_MARK, CONTROLS, MODEL, RECIPE, BuildProgress


def _finish_build(folder: Path) -> None:
    """What a finished build leaves: the model with its mark, the dataset and its control images."""
    (folder / MODEL).mkdir(parents=True)
    (folder / MODEL / BUILT_MARK).write_text(json.dumps({"recipe": RECIPE}), encoding="utf-8")
    (folder / "data").mkdir()
    (folder / CONTROLS).mkdir()


def test_the_page_line_says_how_far_the_build_is_and_when_it_failed(tmp_path: Path) -> None:
    demo = DemoBuild(tmp_path / "demo")
    progress = BuildProgress(demo.progress_file)
    progress.stage("building the tiny model")
    assert "Preparing the demo model** (once): building the tiny model…" in demo.state().text
    time.sleep(0.05)
    progress.step("autoencoder", 50, 500, {"autoencoder": 500, "denoiser": 600})
    state = demo.state()
    assert state.building and not state.ready
    assert "teaching it shapes, autoencoder step 50/500, ETA 0:0" in state.text and "queues its run" in state.text
    eta = json.loads(demo.progress_file.read_text())["eta_s"]
    assert eta > 0  # 450 autoencoder steps and 600 denoiser steps are left at the pace of the first 50
    progress.failed("OSError: disk full")
    assert "could not be built**: OSError: disk full" in demo.state().text and not demo.state().building
    _finish_build(demo.folder)
    assert demo.state().ready and "ready" in demo.state().text


def test_a_demo_run_waits_in_the_queue_until_the_demo_is_built(tmp_path: Path) -> None:
    demo = DemoBuild(tmp_path / "demo")
    jobs = JobManager(tmp_path / "runs", python=str(stand_in_python(tmp_path, until_released=True)))
    queue = DemoQueue(jobs, demo)
    on_demo = TrainConfig("lora", {"max_train_steps": 1, "output_name": "demo",
                                   "pretrained_model_name_or_path": str(demo.folder / MODEL)})
    waiting, said = queue.submit(on_demo)
    assert "starts by itself when the demo model is ready" in said
    assert read_status(waiting)["state"] == "queued" and "demo model" in read_status(waiting)["message"]
    stats = render(RunWatcher(waiting).refresh())[2][1]  # the run panel says why it waits
    assert "Waiting in the queue" in stats and "waits for the demo model to be ready" in stats
    other, said = queue.submit(TrainConfig("lora", {"max_train_steps": 1, "output_name": "other"}))
    assert said.startswith("Started")  # a run on another model does not wait behind it
    wait_until(lambda: (other / "argv.json").exists(), "the other run to start")
    (other / "release").touch()
    wait_until(lambda: not jobs.active_runs(), "the other run to end")
    assert queue.start_ready() == [] and read_status(waiting)["state"] == "queued"

    _finish_build(demo.folder)
    assert queue.start_ready() == [waiting]
    wait_until(lambda: (waiting / "argv.json").exists(), "the demo run to start once the demo is built")
    assert not read_status(waiting)["message"]
    (waiting / "release").touch()


def test_validate_and_start_take_a_demo_config_while_the_demo_is_built(tmp_path: Path) -> None:
    demo = DemoBuild(tmp_path / "demo")
    values = {"pretrained_model_name_or_path": str(demo.folder / MODEL), "train_data_dir": str(demo.folder / "data"),
              "output_dir": str(tmp_path / "out"), "max_train_steps": 10}
    waiting = check_start("lora", values, None, demo)
    assert waiting.ok and any("still being prepared" in w for w in waiting.warnings)
    assert not check_start("lora", {**values, "learning_rate": -1.0}, None, demo).ok  # other problems still count
    assert not check_start("lora", values, None, None).ok  # no demo being built: the model is missing
    elsewhere = {**values, "pretrained_model_name_or_path": str(tmp_path / "mine")}
    assert not check_start("lora", {**elsewhere, "train_data_dir": str(tmp_path / "data")}, None, demo).ok


def test_the_generate_tab_opens_on_the_demo_and_its_newest_lora(tmp_path: Path) -> None:
    builtin = tmp_path / "presets"
    builtin.mkdir()
    out = tmp_path / "out"
    (builtin / "demo.toml").write_text(
        'schema_version = 1\nmethod = "lora"\n[model]\npretrained_model_name_or_path = "demo/tiny-sd1"\n'
        f'[sampling]\nsample_prompt_lines = ["sks shape, grey cross --s 20 --d 1"]\n'
        f'[saving]\noutput_dir = {json.dumps(str(out))}\noutput_name = "demo_lora"\n', encoding="utf-8")
    presets = Presets(tmp_path / "user", builtin_dir=builtin)
    assert demo_values(presets) == {"model": "demo/tiny-sd1", "prompts": ["sks shape, grey cross --s 20 --d 1"],
                                    "loras": []}
    out.mkdir()
    lora = {"lora_unet_x.lora_down.weight": np.zeros((2, 2), np.float32)}
    for name in ["demo_lora-000001.safetensors", "demo_lora.safetensors", "other.safetensors"]:
        save_file(lora, out / name)
        time.sleep(0.02)
    (out / "demo_lora-state").mkdir()  # a training state is no LoRA
    assert demo_values(presets)["loras"] == [str(out / "demo_lora.safetensors")]
