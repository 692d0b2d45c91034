"""The browser tests' app and browser: a real `app.py` process on CPU driven by Playwright with Debian's chromium.

tests/conftest.py serves the fixtures here to every browser module: one demo app (`--demo`, a fresh `--runs-dir`) for
the whole session (each pytest-xdist worker has its own) instead of one per module, since starting the app costs tens
of seconds on a busy CPU; a browser per module. Tests that need other flags start their own with `_start_app`.
Screenshots go to $ATELIER_SCREENSHOTS when set, else to a temporary folder.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import free_port

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
APP_READY_S = 120  # imports torch + gradio (the built_demo fixture has built the demo beforehand)
RUN_S = 150  # one short demo run on a busy 2-core CPU, trainer start-up included
UI_MS = 30_000  # a page update that needs no training
VIEWPORT = {"width": 1400, "height": 1000}

try:
    import playwright.sync_api as playwright_api
    from playwright.sync_api import expect

    expect.set_options(timeout=UI_MS)
except ImportError:  # the tests that need no browser still run
    playwright_api = expect = None


# ----------------------------------------------------------------------------------------------------------
# app processes


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1",
            **extra}


@dataclass
class App:
    url: str
    proc: subprocess.Popen
    log: Path
    runs_dir: Path

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-4000:]


def _start_app(args: list[str], workdir: Path, env: dict[str, str] | None = None) -> App:
    port = free_port()
    runs_dir = workdir / "runs"
    log = workdir / "app.log"
    cmd = [sys.executable, "app.py", "--headless", "--runs-dir", str(runs_dir),
           "--presets-dir", str(workdir / "presets"), "--server-port", str(port), *args]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env or _env(), stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    app = App(f"http://127.0.0.1:{port}/", proc, log, runs_dir)
    deadline = time.monotonic() + APP_READY_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"app.py exited with code {proc.returncode} before serving:\n{app.output()}")
        try:
            with urllib.request.urlopen(app.url, timeout=5) as response:
                if response.status == 200:
                    return app
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.5)
    _stop_app(app)
    pytest.fail(f"app.py did not answer on {app.url} within {APP_READY_S} s:\n{app.output()}")


def _stop_app(app: App) -> None:
    if app.proc.poll() is None:
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            try:
                os.killpg(app.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                app.proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue


def _stop_runs(runs_dir: Path, wait_s: float = 60) -> None:
    """Leave no trainer running: ask active runs to stop, kill what does not (each run has its own group)."""
    from trainers.core.rundir import ACTIVE_STATES, effective_state, read_status, request

    if not runs_dir.is_dir():
        return
    active = [r for r in runs_dir.iterdir() if r.is_dir() and effective_state(read_status(r)) in ACTIVE_STATES]
    for run in active:
        request(run, "stop")
    deadline = time.monotonic() + wait_s
    while active and time.monotonic() < deadline:
        active = [r for r in active if effective_state(read_status(r)) in ACTIVE_STATES]
        time.sleep(0.5)
    for run in active:
        pgid = read_status(run).get("pgid")
        if pgid:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture(scope="session")
def demo_app(tmp_path_factory: pytest.TempPathFactory, built_demo: Path) -> Iterator[App]:
    app = _start_app(["--demo"], tmp_path_factory.mktemp("atelier_app"))
    try:
        yield app
    finally:
        _stop_runs(app.runs_dir, wait_s=30)
        _stop_app(app)


@pytest.fixture(scope="module")
def browser() -> Iterator:
    """Chromium, one per module: Playwright's sync API keeps an event loop running while it is open, and the tests
    after a browser module call asyncio.run (a second to launch it again)."""
    if playwright_api is None:
        pytest.skip("the playwright package is missing (bash setup.sh --dev)")
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing (bash setup.sh --dev installs Debian's chromium)")
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@contextmanager
def page_at(browser, viewport: dict[str, int] = VIEWPORT) -> Iterator:
    """A page in a browser context of its own (its own localStorage), closed afterwards."""
    context = browser.new_context(viewport=viewport)
    pg = context.new_page()
    pg.set_default_timeout(UI_MS)
    try:
        yield pg
    finally:
        context.close()


@pytest.fixture
def page(browser) -> Iterator:
    with page_at(browser) as pg:
        yield pg


@pytest.fixture(scope="session")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = os.environ.get("ATELIER_SCREENSHOTS")
    path = Path(folder) if folder else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path
