"""A run killed with SIGKILL (the out-of-memory killer, kill -9) does not stay 'running': once its processes are
gone, the GUI and status.json say it failed, and Resume takes it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gui.run_files import RunWatcher, list_runs
from trainers.core import lifecycle
from trainers.core.rundir import RunState, effective_state, read_status

NO_SUCH_GROUP = 2**22 + 1  # above the largest pid Linux hands out: no process group has this id
REPO = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, **status: object) -> Path:
    run = tmp_path / "runs" / "20260101-lora-1"
    run.mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({"method": "lora"} | status), encoding="utf-8")
    return run


def test_a_run_whose_processes_are_gone_is_recorded_as_failed_in_status_json(tmp_path: Path) -> None:
    run = _run(tmp_path, state="running", launcher_pid=NO_SUCH_GROUP, trainer_pid=NO_SUCH_GROUP, pgid=NO_SUCH_GROUP)
    assert effective_state(read_status(run)) == RunState.FAILED
    assert [r.state for r in list_runs(run.parent)] == [RunState.FAILED]
    status = read_status(run)
    assert status["state"] == "failed" and "SIGKILL" in status["message"] and "Resume" in status["message"]
    assert RunWatcher(run).refresh().state == RunState.FAILED


def test_a_stopping_run_whose_processes_are_gone_is_stopped_and_a_live_one_stays_running(tmp_path: Path) -> None:
    stopping = _run(tmp_path / "a", state="stopping", pgid=NO_SUCH_GROUP)
    assert RunWatcher(stopping).refresh().state == RunState.STOPPED and read_status(stopping)["state"] == "stopped"
    alive = _run(tmp_path / "b", state="running", pgid=os.getpgid(0))  # this test's own group runs
    assert list_runs(alive.parent)[0].state == RunState.RUNNING and read_status(alive)["state"] == "running"


def test_a_killed_generation_job_is_written_off_too(tmp_path: Path) -> None:
    from gui.generate_tab import JobWatcher

    job = _run(tmp_path, state="running", method="generate", launcher_pid=NO_SUCH_GROUP, pgid=NO_SUCH_GROUP)
    assert JobWatcher(job).refresh().state == RunState.FAILED and read_status(job)["state"] == "failed"


def test_a_run_of_another_machine_is_not_written_off_from_this_one(tmp_path: Path) -> None:
    run = _run(tmp_path, state="running", launcher_pid=NO_SUCH_GROUP, pgid=NO_SUCH_GROUP, host="gpu-node-7")
    list_runs(run.parent)  # its pids are another machine's: status.json keeps what that machine wrote
    assert read_status(run)["state"] == "running"


def _launch(run: Path, script: str) -> subprocess.Popen:
    """`script` started as the GUI starts a trainer: in its own process group, recorded as launched."""
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    lifecycle.launched(run, proc.pid, method="lora")
    return proc


def _wait(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


TRAINER = ("import time; from pathlib import Path; from trainers.core.lifecycle import Lifecycle; "
           "Lifecycle(Path({run!r})).running(); time.sleep(120)")


@pytest.mark.slow
def test_a_trainer_killed_with_sigkill_while_no_launcher_waits_shows_failed(tmp_path: Path) -> None:
    run = _run(tmp_path, state="queued")
    proc = _launch(run, TRAINER.format(run=str(run)))
    try:
        _wait(lambda: read_status(run).get("state") == "running")
        assert list_runs(run.parent)[0].state == RunState.RUNNING
        os.killpg(proc.pid, signal.SIGKILL)  # not reaped yet: a zombie, which is no live process
        _wait(lambda: list_runs(run.parent)[0].state == RunState.FAILED)
        assert read_status(run)["state"] == "failed" and "SIGKILL" in read_status(run)["message"]
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_a_killed_launcher_whose_trainer_lives_on_stays_running_until_the_trainer_is_gone(tmp_path: Path) -> None:
    run = _run(tmp_path, state="queued")
    child = TRAINER.format(run=str(run))
    proc = _launch(run, f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); "
                        "time.sleep(120)")
    reaper = threading.Thread(target=lambda: lifecycle.ended_unreported(run, proc.wait(), poll_s=0.05))
    reaper.start()  # what the GUI's launcher thread does
    try:
        _wait(lambda: read_status(run).get("state") == "running")
        trainer = int(read_status(run)["trainer_pid"])
        proc.send_signal(signal.SIGKILL)  # the launcher alone: its trainer is orphaned, and still trains
        time.sleep(0.5)
        assert read_status(run)["state"] == "running" and list_runs(run.parent)[0].state == RunState.RUNNING
        os.kill(trainer, signal.SIGKILL)
        reaper.join(timeout=30)
        assert read_status(run)["state"] == "failed" and list_runs(run.parent)[0].state == RunState.FAILED
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        reaper.join(timeout=30)
