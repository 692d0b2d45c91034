"""The marker rule of tests/process_guard.py: which processes make a test slow, and that an unmarked test that starts
one fails (pytester runs a throwaway test file under the same hooks)."""
from __future__ import annotations

import multiprocessing
import sys
from pathlib import Path

import pytest

from process_guard import fresh_interpreter, heavy

PY = sys.executable


@pytest.mark.parametrize("argv", [
    [PY, "-m", "trainers", "lora", "--run-dir", "r"],
    [PY, "-m", "trainers.train.launcher", "--num_processes", "1", "-m", "trainers", "lora"],
    [PY, "-m", "accelerate.commands.launch", "--multi_gpu"],
    [PY, "-m", "tensorboard.main", "--logdir", "x"],
    [PY, "app.py", "--headless"],
    ["/usr/bin/python3.11", "-m", "trainers", "generate"],
])
def test_trainers_jobs_workers_and_the_app_are_heavy(argv: list[str]) -> None:
    assert heavy(argv)


@pytest.mark.parametrize("argv", [
    [PY, "-c", "import sys; import trainers.data.kohya_folders"],
    ["/tmp/x/python stand-in 'é'", "--run-dir", "r"],
    ["git", "status"],
    ["nvidia-smi", "-L"],
    [PY, "-m", "json.tool", "x.json"],
    [],
])
def test_probes_stand_ins_and_tools_are_not(argv: list[str]) -> None:
    assert not heavy(argv)


def test_spawned_workers_are_heavy_and_forks_are_not() -> None:
    spawn, fork = multiprocessing.get_context("spawn"), multiprocessing.get_context("fork")
    assert fresh_interpreter(spawn.Process(target=print))
    assert fresh_interpreter(multiprocessing.get_context("forkserver").Process(target=print))
    assert not fresh_interpreter(fork.Process(target=print))


def test_an_unmarked_test_that_starts_a_trainer_fails_and_a_marked_one_passes(pytester: pytest.Pytester,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))  # process_guard; not the repo: no trainer loads
    pytester.makeconftest("from process_guard import install, pytest_runtest_protocol, pytest_runtest_teardown\n"
                          "install()\n")
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n    browser: browser\n")
    pytester.makepyfile(f"""
import multiprocessing
import subprocess
import pytest

ARGV = [{PY!r}, "-m", "trainers", "--help-that-does-not-exist"]

def test_unmarked():
    subprocess.run(ARGV, capture_output=True)

@pytest.mark.slow
def test_marked():
    subprocess.run(ARGV, capture_output=True)

def test_a_probe():
    subprocess.run([{PY!r}, "-c", "pass"])

def _worker(method):
    worker = multiprocessing.get_context(method).Process(target=print)
    worker.start()
    worker.join()
    assert worker.exitcode == 0

def test_a_spawned_worker():
    _worker("spawn")

def test_a_forked_worker():
    _worker("fork")
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    result.assert_outcomes(passed=5, errors=2)
    result.stdout.fnmatch_lines(["*test_unmarked starts a trainer, job, worker or app process but is not marked slow*"])
    result.stdout.fnmatch_lines(["*test_a_spawned_worker starts a trainer, job, worker or app process*",
                                 "*multiprocessing*"])
