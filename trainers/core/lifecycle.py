"""How a run's life is recorded in its folder, for training runs and generation jobs alike.

The GUI's launcher records `launched`, `stopping`, and what happened when the process ended
without saying so (`ended_unreported`, `killed`); the process itself records `running`, then one of
`finished`, `stopped` or `failed` (status.json and the matching done / error event). Torch-free.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from trainers.core import events as ev
from trainers.core.rundir import CONFIG, RunState, effective_state, processes_alive, read_status, update_status


class Lifecycle:
    """The process's side. With several processes only the main one writes, except `failed` (see there)."""

    def __init__(self, run_dir: Path | None, events: ev.EventWriter | None = None, is_main: bool = True,
                 rank: int = 0) -> None:
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.is_main, self.rank = is_main, rank
        self.events = events or ev.EventWriter(run_dir, is_main)

    def running(self, **fields: Any) -> None:
        if self.is_main:
            update_status(self.run_dir, state=RunState.RUNNING, started=time.time(), trainer_pid=os.getpid(),
                          pgid=os.getpgid(0), host=socket.gethostname(), **fields)

    def finished(self, output: str, message: str | None = None, **done: Any) -> None:
        if not self.is_main:
            return
        self.events.emit(ev.Done(output=str(output), **done))
        extra = {"message": message} if message else {}
        update_status(self.run_dir, state=RunState.FINISHED, finished=time.time(), exit_code=0, output=str(output),
                      **extra)

    def stopped(self, output: str, message: str, record_output: bool = True) -> None:
        """Stopped on request, after saving what there was to save."""
        if not self.is_main:
            return
        self.events.emit(ev.Done(output=str(output), stopped=True))
        extra = {"output": str(output)} if record_output else {}
        update_status(self.run_dir, state=RunState.STOPPED, finished=time.time(), exit_code=0, message=message,
                      **extra)

    def failed(self, message: str, code: int, state: RunState = RunState.FAILED, **error: Any) -> int:
        """Report a failure (stderr, error event, status) and return `code`.

        The first process to fail names the cause: an error on another rank is written by that rank
        itself (rank 0 would next fail with a lost connection), and a later failure does not
        overwrite the message of the rank that failed first.
        """
        print(f"error: {message}", file=sys.stderr)
        if self.run_dir is None:
            return code
        if not self.is_main and code == 1:
            message = f"rank {self.rank}: {message}"
            ev.EventWriter(self.run_dir).emit(ev.Error(message=message, exit_code=code, rank=self.rank, **error))
            if read_status(self.run_dir).get("state") != RunState.FAILED:
                update_status(self.run_dir, state=state, finished=time.time(), exit_code=code, message=message,
                              failed_rank=self.rank)
        if self.is_main:
            self.events.emit(ev.Error(message=message, exit_code=code, **error))
            if read_status(self.run_dir).get("failed_rank") is None:
                update_status(self.run_dir, state=state, finished=time.time(), exit_code=code, message=message)
        return code


def job_started(job_dir: Path, cfg: Any, **fields: Any) -> Lifecycle:
    """A job's own start (generation and tool jobs): its folder, its config.toml (`cfg.save`; unless the launcher
    wrote it) and `running` recorded with `fields`."""
    job_dir.mkdir(parents=True, exist_ok=True)
    if not (job_dir / CONFIG).exists():
        cfg.save(job_dir / CONFIG)
    life = Lifecycle(job_dir)
    life.running(**fields)
    return life


# ---- the launcher's side (the GUI) ---------------------------------------------------------------------------

def launched(run_dir: Path, launcher_pid: int, **fields: Any) -> None:
    """The process was started in its own process group (its id is the launcher's pid)."""
    update_status(run_dir, state=RunState.STARTING, created=time.time(), launcher_pid=launcher_pid,
                  pgid=launcher_pid, host=socket.gethostname(), **fields)


def stopping(run_dir: Path) -> None:
    update_status(run_dir, state=RunState.STOPPING)


def ended_unreported(run_dir: Path, exit_code: int | None, poll_s: float = 1.0) -> None:
    """The launcher exited (`exit_code`; None: not known, it was not our child) while the run still looked active:
    once the last of its processes is gone too (a killed launcher can leave the trainer running), say how it ended.
    Failed runs are resumable from their newest training state (Resume)."""
    while RunState.of((now := read_status(run_dir)).get("state")).active and processes_alive(now):
        time.sleep(poll_s)
    status = read_status(run_dir)  # its processes are gone: nothing of the run writes any more
    state = RunState.of(status.get("state"))
    if not state.active:
        return
    if exit_code is None:
        message = ("its processes ended without reporting (killed with SIGKILL: by the out-of-memory killer or from "
                   "outside); Resume continues from its newest training state")
    elif exit_code < 0 and -exit_code == signal.SIGKILL or exit_code == 137:
        message = "killed by the system (SIGKILL): likely out of system memory"
    else:
        message = f"the trainer exited with code {exit_code} before reporting; see the log"
    final = RunState.STOPPED if state == RunState.STOPPING else RunState.FAILED
    extra = {"exit_code": exit_code} if exit_code is not None else {}
    update_status(run_dir, state=final, finished=time.time(), message=message, **extra)


def settled_state(run_dir: Path, status: dict[str, Any]) -> RunState:
    """effective_state of `status` (read from `run_dir`), written into status.json when the run looked active but
    its processes are gone: a run killed while no launcher of this GUI waited on it (the GUI restarted, a run
    started by hand) does not stay 'running' there."""
    state = effective_state(status)
    here = status.get("host", socket.gethostname()) == socket.gethostname()  # pids of another machine say nothing
    if RunState.of(status.get("state")).active and not state.active and here:
        ended_unreported(run_dir, None)
    return state


def killed(run_dir: Path, message: str, exit_code: int | None = None) -> None:
    """The process did not stop in time and was ended from outside (or ended itself without saving)."""
    extra = {"exit_code": exit_code} if exit_code is not None else {}
    update_status(run_dir, state=RunState.STOPPED, finished=time.time(), message=message, **extra)
