"""Pause / Continue from the GUI: at a step boundary a paused run waits, its model and optimizer kept loaded, until
Continue or Stop. The wait is a pause of trainers/train/pauses.py ("paused"), so it stays out of it/s and the ETA;
status.json says state "paused" meanwhile. Every rank waits together: each poll is rank 0's, broadcast."""
from __future__ import annotations

import time
from pathlib import Path

from trainers.core.rundir import Request, RunState, read_status, update_status
from trainers.train.control import Control
from trainers.train.pauses import Pauses

POLL_S = 0.5


class UserPause:
    def __init__(self, control: Control, pauses: Pauses, run_dir: Path | None, is_main: bool) -> None:
        self.control, self.pauses = control, pauses
        self.run_dir = run_dir if is_main else None  # rank 0 speaks for the run

    def held(self, requests: set[str]) -> set[str]:
        """`requests` after a pause they ask for, if any: the requests that came while paused join them (Stop ends
        the pause; Save now waits for Continue); PAUSE and CONTINUE are consumed here."""
        if Request.PAUSE not in requests or Request.CONTINUE in requests:  # both at once: the pause is over
            return requests - {Request.PAUSE, Request.CONTINUE}
        found = set(requests) - {Request.PAUSE, Request.CONTINUE}
        with self.pauses("paused"):
            self._state(RunState.PAUSED, paused_at=time.time())
            while Request.STOP not in found:
                time.sleep(POLL_S)
                came = self.control.poll()
                found |= came - {Request.PAUSE, Request.CONTINUE}
                if Request.CONTINUE in came:
                    break
            if Request.STOP not in found:
                self._state(RunState.RUNNING, paused_at=None)
        return found

    def _state(self, state: RunState, **fields: object) -> None:
        if self.run_dir is None:
            return
        if read_status(self.run_dir).get("state") == RunState.STOPPING:  # Stop came first: the GUI's word stands
            return
        update_status(self.run_dir, state=state, **fields)
