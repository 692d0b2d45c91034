"""Requests reaching a running trainer: flag files in <run-dir>/control/ (see core/rundir.py), signals, and timers.

Rank 0 looks, then tells every rank, so all processes act on the same step.

SIGINT/SIGTERM ask for a stop: the loop saves the training state at the end of the current step
and exits. If no step ends within STOP_DEADLINE_S plus twice the longest step seen (steps with saves
or samples included), the step is taken as hung and the process exits anyway with a message; once
the stop save has begun it is allowed to finish. A second signal stops at once.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from trainers.core.lifecycle import killed
from trainers.core.rundir import Request, take_requests, update_status

ROLLING_STATE = "save_state"  # the timer of the rolling training state (save_state_every_n_minutes)
STOP_DEADLINE_S = 120.0
EXIT_STOP_TIMEOUT = 124


class Control:
    def __init__(self, run_dir: Path | None, accelerator: Any) -> None:
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.accelerator = accelerator
        self._signalled = False
        self._acknowledged = threading.Event()
        self._timers: dict[str, tuple[float, float]] = {}  # name -> (every_s, last time)
        self._last_poll: float | None = None
        self._longest_step = 0.0  # between two polls: a step with its saves and samples
        self._signalled_at = 0.0
        self._previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._signalled:  # a second Ctrl-C means now
            raise KeyboardInterrupt
        self._signalled = True
        self._signalled_at = time.monotonic()
        name = signal.Signals(signum).name
        print(f"{name}: stopping after this step (the training state is saved); send it again to stop at once",
              file=sys.stderr, flush=True)
        self._arm(STOP_DEADLINE_S, name)

    def _arm(self, seconds: float, name: str) -> None:
        watchdog = threading.Timer(seconds, self._deadline, args=(name,))
        watchdog.daemon = True
        watchdog.start()

    def _deadline(self, name: str) -> None:
        """No step ended in time after the signal: leave without saving rather than hang."""
        if self._acknowledged.is_set():
            return
        waited, allowed = time.monotonic() - self._signalled_at, STOP_DEADLINE_S + 2 * self._longest_step
        if waited < allowed:  # this run has steps (with saves or samples) that long: wait for this one too
            self._arm(allowed - waited, name)
            return
        message = f"{name}: no training step ended within {waited:.0f} s; exited without saving"
        print(message, file=sys.stderr, flush=True)
        if self.accelerator.is_main_process and self.run_dir is not None:
            killed(self.run_dir, message, EXIT_STOP_TIMEOUT)
        os._exit(EXIT_STOP_TIMEOUT)

    def schedule(self, name: str, every_s: float) -> None:
        """Make `name` a request every `every_s` seconds (decided on rank 0, so every rank agrees)."""
        self._timers[name] = (every_s, time.monotonic())

    def acknowledge(self) -> None:
        """The stop save has begun: the signal deadline no longer applies; the GUI waits for the save."""
        if self._acknowledged.is_set():
            return
        self._acknowledged.set()
        if self.accelerator.is_main_process and self.run_dir is not None:
            update_status(self.run_dir, stop_acknowledged=time.time())

    def poll(self) -> set[str]:
        """Requests pending now (Request values and timer names; the same set on every rank); flags are consumed."""
        found: set[str] = set()
        now = time.monotonic()
        if self._last_poll is not None:
            self._longest_step = max(self._longest_step, now - self._last_poll)
        self._last_poll = now
        if self.accelerator.is_main_process:
            if self._signalled:
                found.add(Request.STOP)
            found |= take_requests(self.run_dir)
            for name, (every, last) in self._timers.items():
                if now - last >= every:
                    found.add(name)
                    self._timers[name] = (every, now)
        if self.accelerator.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            holder = [sorted(found)]
            broadcast_object_list(holder, from_process=0)
            found = set(holder[0])
        return found

    def close(self) -> None:
        """Give the signals back (a trainer run in-process, e.g. by tests, leaves no handler behind)."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
