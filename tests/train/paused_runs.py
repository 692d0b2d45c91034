"""What the pause tests (test_user_pause.py, test_live_render.py) share: a LoRA run's options on the fake family,
waiting for a state, a LoRA file's tensors, and a thread that presses Pause before the run starts and acts once the
run says it is paused."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from trainers.core.rundir import Request, read_status, request
from trainers.demo import build_dataset

WAIT_S = 300.0


def lora_options(model_dir: Path, tmp_path: Path, fast: dict[str, object]) -> dict[str, object]:
    """A LoRA run of `model_dir` on the demo's dataset (2 repeats of "sks shape"), `fast` its training options."""
    data = build_dataset(tmp_path / "data", folder="2_sks shape")
    return {"pretrained_model_name_or_path": str(model_dir), "train_data_dir": str(data),
            "output_dir": str(tmp_path / "out"), **fast}


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def lora_file(path: Path) -> dict[str, torch.Tensor]:
    from trainers.methods.lora.file_format import read_lora_file

    return read_lora_file(path)[0]


class WhilePaused(threading.Thread):
    """Pause pressed before the run starts (a run pauses at the end of a step); once it says paused, `act` (or a
    subclass's while_paused) runs. What it raises is kept in `error` for the test, and, with stop_on_error, Stop
    asked so that the run does not wait paused."""

    def __init__(self, run: Path, act: Callable[[], None] | None = None, stop_on_error: bool = False) -> None:
        super().__init__(daemon=True)
        self.run_dir, self.act, self.stop_on_error = run, act, stop_on_error
        self.error: BaseException | None = None
        request(run, Request.PAUSE)

    def while_paused(self) -> None:
        assert self.act is not None
        self.act()

    def run(self) -> None:  # noqa: D102 - Thread's entry point
        try:
            wait_for(lambda: read_status(self.run_dir).get("state") == "paused", "the paused state")
            self.while_paused()
        except BaseException as err:  # noqa: BLE001 - reported by the test
            self.error = err
            if self.stop_on_error:
                request(self.run_dir, Request.STOP)
