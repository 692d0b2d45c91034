"""Samples and saves between steps: shown as what they are, left out of it/s, done in the optimizer's eval mode."""
from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

from trainers.train.pauses import Pauses
from trainers.train.progress import ProgressMeter


class _Modes:
    def __init__(self) -> None:
        self.log: list[str] = []

    def evaluating(self):  # noqa: ANN201 - a stand-in for OptimizerModes.evaluating
        import contextlib

        @contextlib.contextmanager
        def scope():
            self.log.append("eval")
            yield
            self.log.append("train")

        return scope()


def test_a_pause_is_shown_in_the_status_and_left_out_of_the_rates(tmp_path: Path) -> None:
    meter = ProgressMeter(total_steps=100, images_per_step=1)
    meter.start()
    modes = _Modes()
    pause = Pauses(tmp_path, True, modes, meter)  # type: ignore[arg-type]
    seen: list[str] = []

    def sample() -> None:
        seen.append(json.loads((tmp_path / "status.json").read_text())["activity"])
        time.sleep(0.3)

    for step in range(1, 4):
        time.sleep(0.01)
        meter.update(step, 1, 1, 1.0, 1e-4)
    pause.around(sample, "sampling")()
    progress = meter.update(4, 1, 1, 1.0, 1e-4)
    assert seen == ["sampling"] and modes.log == ["eval", "train"]
    assert json.loads((tmp_path / "status.json").read_text())["activity"] == ""
    assert progress.it_per_s > 20  # ~0.01 s a step; with the 0.3 s sample counted it would be under 12


def test_other_ranks_do_not_write_the_status(tmp_path: Path) -> None:
    meter = ProgressMeter(total_steps=10, images_per_step=1)
    meter.start()
    with Pauses(tmp_path, False, SimpleNamespace(evaluating=_Modes().evaluating), meter)("saving"):  # type: ignore[arg-type]
        pass
    assert not (tmp_path / "status.json").exists()
