"""Work between optimizer steps (samples, saves): done in the optimizer's eval mode (schedule-free optimizers
sample and save their averaged weights), shown in the page as "sampling…" / "saving…", and kept out of it/s."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from trainers.core.rundir import update_status
from trainers.train.optim import OptimizerModes
from trainers.train.progress import ProgressMeter


class Pauses:
    def __init__(self, run_dir: Path | None, is_main: bool, modes: OptimizerModes, meter: ProgressMeter) -> None:
        self.run_dir = run_dir if is_main else None  # rank 0 speaks for the run
        self.modes, self.meter = modes, meter
        self._depth = 0  # a save inside a sample (or the reverse) is one pause

    @contextlib.contextmanager
    def __call__(self, activity: str) -> Iterator[None]:
        started = time.perf_counter()
        self._depth += 1
        if self.run_dir is not None and self._depth == 1:
            update_status(self.run_dir, activity=activity)
        try:
            with self.modes.evaluating():
                yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.meter.exclude(time.perf_counter() - started)
                if self.run_dir is not None:
                    update_status(self.run_dir, activity="")

    def around(self, fn: Callable[..., Any] | None, activity: str) -> Callable[..., Any] | None:
        """`fn` run as a pause (None stays None: e.g. a run without sample prompts)."""
        if fn is None:
            return None

        def paused(*args: Any, **kwargs: Any) -> Any:
            with self(activity):
                return fn(*args, **kwargs)

        return paused
