"""Pause / Continue (trainers/train/user_pause.py): a run paused after its first step and continued ends with the same final
weights as an unpaused one, says "paused" while paused, keeps the pause out of it/s; Stop while paused saves and
stops. Trainers run in this process, on the tests' fake model family (tests/fake_family/)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch

from trainers.core import lifecycle
from trainers.core.rundir import CONTROL, Request, read_status, request, update_status

from helpers import events, train
from paused_runs import WAIT_S, WhilePaused, lora_file, lora_options

FAST = {"resolution": "64", "train_batch_size": 2, "max_data_loader_n_workers": 0, "learning_rate": 1e-3,
        "network_dim": 4, "network_alpha": 2, "max_train_steps": 8, "save_precision": "float"}
PAUSE_S = 3.0


@pytest.fixture()
def lora(fake_model_dir: Path, tmp_path: Path) -> dict[str, object]:
    return lora_options(fake_model_dir, tmp_path, FAST)


def _progress_steps(run: Path) -> list[int]:
    try:
        return [e["step"] for e in events(run) if e["type"] == "progress"]
    except (OSError, ValueError):  # not there yet, or a line half written
        return []


class Presser(WhilePaused):
    """Pause pressed before the run starts (the pause comes at the end of step 1 of 8: steps of the fake family
    are too fast for a thread to press it at a given later step); then Continue (or Stop) once it says paused."""

    def __init__(self, run: Path, then: str) -> None:
        super().__init__(run)
        self.then = then
        self.seen: dict[str, object] = {}

    def while_paused(self) -> None:
        self.seen = {**read_status(self.run_dir), "steps": _progress_steps(self.run_dir)}
        time.sleep(PAUSE_S)
        self.seen["steps_later"] = _progress_steps(self.run_dir)
        if self.then == "stop":  # as the GUI's Stop does (gui/jobs.py), without its kill timer
            request(self.run_dir, Request.STOP)
            lifecycle.stopping(self.run_dir)
        else:
            request(self.run_dir, Request.CONTINUE)


@pytest.mark.slow
def test_a_paused_then_continued_run_ends_with_the_weights_of_an_unpaused_one(lora: dict, tmp_path: Path) -> None:
    assert train("lora", tmp_path / "straight", **lora, output_name="straight") == 0
    run = tmp_path / "paused"
    presser = Presser(run, then="continue")
    presser.start()
    assert train("lora", run, **lora, output_name="paused") == 0
    presser.join(WAIT_S)
    assert presser.error is None, presser.error
    out = tmp_path / "out"
    a, b = lora_file(out / "straight.safetensors"), lora_file(out / "paused.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    seen = presser.seen
    assert seen["state"] == "paused" and seen["activity"] == "paused" and seen["paused_at"]
    assert seen["steps"] == seen["steps_later"], "no step trained while paused"
    paused_at = seen["steps"][-1]  # type: ignore[index]
    assert paused_at == 1
    status = read_status(run)
    assert status["state"] == "finished" and status["activity"] == "" and status["paused_at"] is None
    progress = [e for e in events(run) if e["type"] == "progress"]
    assert [e["step"] for e in progress] == list(range(1, 9))
    after = next(e for e in progress if e["step"] == paused_at + 1)
    # with the pause counted, the window's rate would be at most its steps over PAUSE_S
    assert after["it_per_s"] > 1.5 * (paused_at + 1) / PAUSE_S, after


@pytest.mark.slow
def test_stop_while_paused_saves_the_state_and_stops(lora: dict, tmp_path: Path) -> None:
    run = tmp_path / "run"
    presser = Presser(run, then="stop")
    presser.start()
    assert train("lora", run, **lora) == 0
    presser.join(WAIT_S)
    assert presser.error is None, presser.error
    paused_at = presser.seen["steps"][-1]  # type: ignore[index]
    status = json.loads((run / "status.json").read_text())
    state = tmp_path / "out" / f"lora-step{paused_at:08d}-state"
    assert status["state"] == "stopped" and state.is_dir(), status
    saved = [e for e in events(run) if e["type"] == "checkpoint"]
    assert saved[-1]["kind"] == "stop" and saved[-1]["state"] == str(state)


def test_the_gui_asks_a_running_run_to_pause_and_a_paused_one_to_continue(tmp_path: Path) -> None:
    from gui.jobs import JobManager

    jobs, run = JobManager(tmp_path / "runs"), tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    update_status(run, state="running", method="lora", trainer_pid=os.getpid())
    assert not jobs.continue_(run) and not (run / CONTROL / "continue").exists(), "not paused: nothing to continue"
    assert jobs.pause(run) and (run / CONTROL / "pause").exists()
    update_status(run, state="paused")
    assert not jobs.pause(run)
    assert jobs.continue_(run) and (run / CONTROL / "continue").exists()
    update_status(run, state="finished")
    (run / CONTROL / "pause").unlink()
    assert not jobs.pause(run) and not (run / CONTROL / "pause").exists(), "an ended run is not asked"
