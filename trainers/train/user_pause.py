"""Pause / Continue from the GUI: at a step boundary a paused run waits, its model and optimizer kept loaded, until
Continue or Stop. The wait is a pause of trainers/train/pauses.py ("paused"), so it stays out of it/s and the ETA;
status.json says state "paused" meanwhile. Every rank waits together: each poll is rank 0's, broadcast. While
paused, a render request of the Generate tab (control/render.json) is rendered with the live weights
(trainers/train/live_render.py); one still there when the run goes on is answered as not rendered."""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from trainers.core.rundir import Request, RunState, read_status, take_render_request, update_status
from trainers.train.control import Control
from trainers.train.live_render import Renderer
from trainers.train.pauses import Pauses

POLL_S = 0.5


class UserPause:
    def __init__(self, control: Control, pauses: Pauses, run_dir: Path | None, is_main: bool,
                 render: Renderer | None = None, went_on: Callable[[object, int], None] | None = None) -> None:
        self.control, self.pauses = control, pauses
        self.run_dir = run_dir if is_main else None  # rank 0 speaks for the run
        self.render, self.went_on = render, went_on

    def held(self, requests: set[str], step: int = 0) -> set[str]:
        """`requests` after a pause they ask for, if any: the requests that came while paused join them (Stop ends
        the pause; Save now waits for Continue); PAUSE and CONTINUE are consumed here. `step` is the step paused
        after (what a live render says it rendered)."""
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
                if self.render is not None and Request.STOP not in found:
                    wanted = self._render_request()
                    if wanted is not None:
                        self.render(wanted, step)
            if self.run_dir is not None and self.went_on is not None:
                left = take_render_request(self.run_dir)
                if left is not None:
                    self.went_on(left, step)
            if Request.STOP not in found:
                self._state(RunState.RUNNING, paused_at=None)
        return found

    def _render_request(self) -> object:
        """The render request pending now (rank 0's, the same on every rank), or None."""
        wanted = take_render_request(self.run_dir) if self.run_dir is not None else None
        accelerator = self.control.accelerator
        if accelerator.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            holder = [wanted]
            broadcast_object_list(holder, from_process=0)
            wanted = holder[0]
        return wanted

    def _state(self, state: RunState, **fields: object) -> None:
        if self.run_dir is None:
            return
        if read_status(self.run_dir).get("state") == RunState.STOPPING:  # Stop came first: the GUI's word stands
            return
        update_status(self.run_dir, state=state, **fields)
