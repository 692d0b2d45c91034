"""Browser tests: a real `app.py` process driven by Playwright with Debian's chromium, on CPU.

One app process (``--demo``, a fresh ``--runs-dir``: tests/browser_app.py, shared by every browser module) serves
the page tests; the login tests start their own. Assertions are about what a user sees. Screenshots of every tab and of a running job go
to $ATELIER_SCREENSHOTS when set, else to a temporary folder.

    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q tests/gui/test_gui_browser.py
"""
from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from browser_app import (  # noqa: F401 - re-exported for the other browser modules
    REPO,
    RUN_S,
    UI_MS,
    VIEWPORT,
    App,
    _env,
    _start_app,
    _stop_app,
    _stop_runs,
    expect,
    page_at,
    playwright_api,
)
from helpers import free_port

pytestmark = pytest.mark.browser

LONG = 5000  # steps of a run that is stopped long before its end (about 9 steps/s on an idle 2-core CPU)


@pytest.fixture(scope="module")
def demo_tab(browser, demo_app: App) -> Iterator:
    """One page on the demo app, shared by the page tests (a page load costs seconds on a busy CPU)."""
    context = browser.new_context(viewport=VIEWPORT)
    pg = context.new_page()
    pg.set_default_timeout(UI_MS)
    pg.goto(demo_app.url)
    expect(pg.locator("#report-lora")).to_contain_text("Loaded preset demo", timeout=90_000)
    try:
        yield pg
    finally:
        context.close()


@pytest.fixture
def lora(demo_tab, demo_app: App) -> Iterator:
    """The shared page on its LoRA tab; no run is left active afterwards."""
    demo_tab.get_by_role("tab", name="LoRA", exact=True).click()
    expect(demo_tab.locator("#start-lora")).to_be_visible()
    try:
        yield demo_tab
    finally:
        _stop_runs(demo_app.runs_dir)


# ----------------------------------------------------------------------------------------------------------
# page helpers


def _fill(page, option: str, value: str) -> None:
    """Type `value` into an option's field and commit it. Typed again once if the field shows another value after
    5 s: a group opened just after a page (re)load can mount its fields a second time, from the values the page was
    built with (seen in CI on a loaded machine: the field typed into was replaced by one showing the preset's)."""
    field = page.locator(f"#opt-{option}").locator("textarea, input").first
    for timeout in (5_000, 30_000):
        field.fill(value)
        field.press("Tab")  # commit the value (change/blur) before a button reads it
        try:
            expect(field).to_have_value(value, timeout=timeout)
            return
        except AssertionError:
            if timeout == 30_000:
                raise


def _open(page, group: str, advanced: bool = False) -> None:
    """Open a LoRA form group's accordion (closed ones render their fields only once opened), and with `advanced`
    its Advanced one inside. Gradio marks an open accordion's header with the class `open`."""
    accordion = page.locator(f"#group-lora-{group}")
    headers = [accordion.locator("button.label-wrap").first]
    if advanced:
        headers.append(accordion.locator("button.label-wrap", has_text="Advanced"))
    for header in headers:
        if "open" not in (header.get_attribute("class") or "").split():
            header.click()
        expect(header).to_have_class(re.compile(r"(^|\s)open(\s|$)"))


def _configure(page, out: Path, steps: int) -> None:
    """The demo preset's model and data, `steps` optimizer steps (100 an epoch), LoRA files under `out` (not the
    repo), one CPU thread (as conftest gives the tests' own processes: unset, a CPU run takes every core, and two
    threads of a tiny model beside the app, the browser and pytest measured 30 s a step, not 0.2 s, on a busy
    2-core machine)."""
    _fill(page, "train_data_dir", "demo/data")
    _fill(page, "output_dir", str(out))
    _fill(page, "max_train_epochs", "")  # epochs win over max_train_steps when both are set
    _fill(page, "max_train_steps", str(steps))
    _open(page, "launch", advanced=True)
    _fill(page, "num_cpu_threads_per_process", "1")


def _no_samples(page) -> None:
    """No samples scheduled: the demo's (before the first step and each epoch, and the save health's renders of the
    base model and the LoRA in a run that samples) cost a run that is stopped early about 20 s of CPU."""
    _open(page, "sampling")
    _fill(page, "sample_every_n_epochs", "")
    page.locator("#opt-sample_at_first input").uncheck()


def _progress(page) -> tuple[int, int]:
    text = page.locator("#run-progress").inner_text()
    found = re.search(r"(\d+)\s*/\s*(\d+)\s*steps", text)
    assert found, f"no 'N / T steps' in the progress bar: {text!r}"
    return int(found.group(1)), int(found.group(2))


def _wait_steps(page, at_least: int, timeout_s: float = RUN_S) -> int:
    """Wait until the progress bar shows at least `at_least` steps; return the step shown."""
    deadline = time.monotonic() + timeout_s
    step = -1
    while time.monotonic() < deadline:
        step, _ = _progress(page)
        if step >= at_least:
            return step
        page.wait_for_timeout(500)
    pytest.fail(f"progress stayed at {step} (wanted >= {at_least}) for {timeout_s:.0f} s; "
                f"title: {page.locator('#run-title').inner_text()!r}; log: {_log(page)[-1500:]!r}")


def _log(page) -> str:
    try:
        return page.locator("#run-log").locator("textarea").input_value(timeout=2000)
    except playwright_api.Error:
        return ""


def _runs(app: App) -> set[str]:
    return {p.name for p in app.runs_dir.iterdir() if p.is_dir()} if app.runs_dir.is_dir() else set()


def _start(page) -> str:
    """Press Start on the LoRA tab; return the id of the run it started (shown in the run panel)."""
    report = page.locator("#report-lora")
    # the shared page may still say "Started <the previous test's run>", and while the click is handled gradio's
    # progress overlay changes the text without replacing it: wait for a Started naming another run
    before = re.search(r"Started\s+(\S+)", report.inner_text())
    page.locator("#start-lora").click()
    other = rf"(?!{re.escape(before.group(1))}\b)" if before else ""
    expect(report).to_contain_text(re.compile(rf"Started\s+{other}\S+"), timeout=60_000)
    run_id = re.search(r"Started\s+(\S+)", report.inner_text()).group(1)
    expect(page.locator("#run-title")).to_contain_text(run_id)
    return run_id


# ----------------------------------------------------------------------------------------------------------
# the page


def test_empty_dataset_folder_is_reported_in_the_dataset_group(lora, demo_app: App, shots: Path,
                                                                tmp_path: Path) -> None:
    page = lora
    empty = tmp_path / "empty_dataset"
    empty.mkdir()
    problem = page.locator("#group-lora-dataset").locator(".block.group-problems")
    expect(problem).to_be_hidden()
    runs_before = _runs(demo_app)

    _fill(page, "train_data_dir", str(empty))
    page.locator("#validate-lora").click()
    report = page.locator("#report-lora")
    expect(report).to_contain_text("problem(s) to fix")
    expect(report).to_contain_text("the dataset: see the Dataset group")
    expect(problem).to_be_visible()  # the Dataset accordion was opened to show it
    expect(problem).to_contain_text("this folder is empty")
    expect(problem).to_contain_text(str(empty))
    expect(problem).to_contain_text("10_sks dog")  # the expected layout, by example
    page.locator("#group-lora-dataset").screenshot(path=str(shots / "dataset_error.png"))

    # Start runs the same checks and starts nothing (another empty folder, to see this answer arrive).
    other = tmp_path / "another_empty_dataset"
    other.mkdir()
    _fill(page, "train_data_dir", str(other))
    page.locator("#start-lora").click()
    expect(problem).to_contain_text(str(other))
    expect(report).to_contain_text("problem(s) to fix")
    expect(report).not_to_contain_text("Started")
    assert _runs(demo_app) == runs_before

    # A good folder clears the message.
    _fill(page, "train_data_dir", "demo/data")
    page.locator("#validate-lora").click()
    expect(report).to_contain_text("Ready to start")
    expect(report).to_contain_text("steps in total")
    expect(problem).to_be_hidden()


def test_messages_and_help_read_in_full(lora) -> None:
    """Text with <...> or * in it is shown as written, not taken as HTML or emphasis."""
    page = lora
    help_text = page.locator("#opt-optimizer_type")
    # its first sentence, and a link to the whole help (gui/option_help.py); gradio's info rules read no escapes
    expect(help_text).to_contain_text("Optimizer, as in sd-scripts (any case), or a module.Class path")
    expect(help_text.get_by_role("link", name="more")).to_have_attribute("href", "manual/option/optimizer_type")
    expect(help_text.locator("em")).to_have_count(0)
    _fill(page, "train_data_dir", "")  # no images: they are required
    page.locator("#validate-lora").click()
    full = ("train_data_dir: is required: give a folder of <repeats>_<tokens> subfolders (or set metadata_dir "
            "or dataset_config)")
    expect(page.locator("#report-lora")).to_contain_text(full)
    note = page.locator("#note-train_data_dir")  # right under the field
    expect(note).to_contain_text("<repeats>_<tokens> subfolders")
    expect(page.locator("#note-output_name")).to_be_hidden()  # it has a value
    _fill(page, "train_data_dir", "demo/data")
    page.locator("#validate-lora").click()
    expect(note).to_be_hidden()


def test_start_shows_progress_to_total_and_the_lora_file(lora, shots: Path, tmp_path: Path) -> None:
    page = lora
    _configure(page, tmp_path / "out", steps=20)
    _no_samples(page)
    run_id = _start(page)
    title = page.locator("#run-title")
    expect(title).to_contain_text(re.compile(r"(Starting|Training): " + re.escape(run_id)))
    expect(page.locator("#run-progress")).to_contain_text("20 / 20 steps", timeout=RUN_S * 1000)
    expect(title).to_contain_text(f"Finished: {run_id}", timeout=RUN_S * 1000)  # after the save and its check
    lora_file = tmp_path / "out" / "demo_lora.safetensors"
    expect(page.locator("#run-result")).to_contain_text(f"Saved: {lora_file}")
    assert lora_file.is_file()
    page.screenshot(path=str(shots / "finished_job.png"), full_page=True)


def test_a_second_start_queues_a_reload_keeps_streaming_and_stop_saves_a_checkpoint(lora, demo_app: App, shots: Path,
                                                                                     tmp_path: Path) -> None:
    page = lora
    _configure(page, tmp_path / "out", steps=LONG)  # far more than the test waits for
    _no_samples(page)
    run_id = _start(page)
    title = page.locator("#run-title")
    before = _wait_steps(page, 1)
    expect(page.locator("#run-stats")).to_contain_text(re.compile(r"Epoch\s+\d+ / \d+.*it/s"))
    page.screenshot(path=str(shots / "running_job.png"), full_page=True)

    # Only one run at a time on a machine without GPUs: a second Start queues behind it, and can be cancelled.
    page.locator("#start-lora").click()
    report = page.locator("#report-lora")
    expect(report).to_contain_text("Queued")
    expect(report).to_contain_text(f"when run {run_id} is done")
    queued_id = re.search(r"Queued\s+(\S+)", report.inner_text()).group(1)
    page.get_by_role("tab", name="Runs", exact=True).click()
    page.get_by_role("button", name="Refresh", exact=True).click()
    page.locator("#runs-pick input").click()
    page.get_by_role("option", name=queued_id).click()
    page.locator("#queue-cancel").click()
    expect(page.locator("#runs-note")).to_contain_text("Queue: empty")
    page.locator("#runs-pick input").click()
    page.get_by_role("option", name=run_id).click()
    page.get_by_role("button", name="Show in run panel").click()  # the panel followed the queued run: go back
    expect(title).to_contain_text(run_id)
    page.get_by_role("tab", name="LoRA", exact=True).click()

    # Reload: the page finds the run again (kept in localStorage) and progress keeps coming.
    page.reload()
    expect(title).to_contain_text(f"Training: {run_id}", timeout=90_000)
    after_reload = _wait_steps(page, before)
    moving = _wait_steps(page, after_reload + 1)  # still moving, not a snapshot taken at load
    assert _progress(page)[1] == LONG
    expect(page.locator("#run-stats")).to_contain_text("it/s")

    # Stop: the trainer saves where it is and exits; the panel says so and lists the checkpoint.
    page.locator("#stop-run").click()
    expect(page.get_by_text("Asked the trainer to save and stop.")).to_be_visible()
    expect(title).to_contain_text(f"Stopped: {run_id}", timeout=90_000)
    result = page.locator("#run-result")
    expect(result).to_contain_text("Checkpoint saved when stopped")
    expect(result).to_contain_text(re.compile(r"demo_lora-step\d{8}\.safetensors"))
    saved_step = int(re.search(r"demo_lora-step(\d{8})\.safetensors", result.inner_text()).group(1))
    assert moving <= saved_step < LONG
    assert (tmp_path / "out" / f"demo_lora-step{saved_step:08d}.safetensors").is_file()
    assert not (tmp_path / "out" / "demo_lora.safetensors").exists(), "a stopped run is not a finished one"
    assert (tmp_path / "out" / f"demo_lora-step{saved_step:08d}-state" / "manifest.json").is_file()

    # One click resumes it: a new run continues from the saved step, not from 0.
    expect(page.locator("#stop-run")).to_be_hidden()
    page.locator("#resume-run").click()
    told = page.get_by_text(f"Resumed {run_id} as").first
    expect(told).to_be_visible(timeout=60_000)
    resumed_id = re.search(rf"Resumed {re.escape(run_id)} as\s+(\S+)", told.inner_text()).group(1)
    expect(title).to_contain_text(f"Training: {resumed_id}", timeout=90_000)
    expect(page.locator("#resume-run")).to_be_hidden()
    _wait_steps(page, saved_step + 1)
    assert _progress(page)[1] == LONG
    lines = (demo_app.runs_dir / resumed_id / "events.jsonl").read_text(encoding="utf-8").splitlines()
    steps = [e["step"] for e in map(json.loads, lines) if e["type"] == "progress"]
    assert steps[0] == saved_step + 1, f"the resumed run started at step {steps[0]}, not {saved_step + 1}"
    page.locator("#stop-run").click()
    expect(title).to_contain_text(f"Stopped: {resumed_id}", timeout=90_000)


def test_screenshots_of_every_tab(lora, demo_app: App, shots: Path) -> None:
    page = lora
    for title, method in (("LoRA", "lora"), ("Dreambooth", "dreambooth"), ("Finetune", "finetune")):
        page.get_by_role("tab", name=title, exact=True).click()
        expect(page.locator(f"#start-{method}")).to_be_visible()
        expect(page.locator(f"#validate-{method}")).to_be_visible()
        page.screenshot(path=str(shots / f"tab_{method}.png"), full_page=True)

    page.get_by_role("tab", name="Runs", exact=True).click()
    table = page.locator("#runs-table")
    expect(table).to_be_visible()
    page.get_by_role("button", name="Refresh", exact=True).click()
    from trainers.core.rundir import read_status

    for run in _runs(demo_app):  # the tests above started some: each is listed with its state
        # the row whose text starts with the run (a resumed run's note names the run it continues)
        row = table.get_by_role("row").filter(has_text=re.compile(rf"^\s*{re.escape(run)}"))
        expect(row).to_have_count(1)
        expect(row).to_contain_text(read_status(demo_app.runs_dir / run)["state"])
    page.screenshot(path=str(shots / "tab_runs.png"), full_page=True)


# ----------------------------------------------------------------------------------------------------------
# exposure and login


@pytest.mark.parametrize("flags", [["--listen", "0.0.0.0"], ["--listen"]], ids=["listen-0.0.0.0", "listen-flag"])
def test_listen_on_all_interfaces_without_login_refuses_to_start(flags: list[str], tmp_path: Path) -> None:
    port = free_port()
    env = _env()
    env.pop("ATELIER_PASSWORD", None)
    done = subprocess.run([sys.executable, "app.py", "--headless", "--server-port", str(port),
                           "--runs-dir", str(tmp_path / "runs"), *flags],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--listen 0.0.0.0" in done.stderr
    assert "--username/--password" in done.stderr and "--auth-file" in done.stderr and "--no-auth" in done.stderr
    assert "serving on" not in done.stdout
    assert not (tmp_path / "runs").exists()


def test_listen_with_login_asks_for_it(page, tmp_path: Path) -> None:
    password = secrets.token_urlsafe(16)  # it listens on all interfaces for a few seconds: no guessable login
    app = _start_app(["--listen", "0.0.0.0", "--username", "tester"], tmp_path,
                     env=_env(ATELIER_PASSWORD=password))
    try:
        assert "login required" in app.output()
        # Without logging in, the app's configuration (its forms and endpoints) is not served.
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(app.url + "config", timeout=30)
        assert refused.value.code in (401, 403)

        page.goto(app.url)
        username = page.get_by_label("username")
        password_field = page.locator("input[type=password]")
        login = page.get_by_role("button", name="Login", exact=True)
        expect(password_field).to_be_visible(timeout=60_000)
        expect(page.get_by_text("Atelier: please log in.")).to_be_visible()
        expect(page.locator("#start-lora")).to_have_count(0)

        username.fill("tester")
        password_field.fill("wrong-" + password)
        login.click()
        expect(page.get_by_text(re.compile("incorrect credentials", re.IGNORECASE))).to_be_visible()
        expect(page.locator("#start-lora")).to_have_count(0)
        expect(password_field).to_have_value("")

        username.fill("tester")  # the login form empties both fields after a failed attempt
        password_field.fill(password)
        login.click()
        expect(page.locator("#start-lora")).to_be_visible(timeout=60_000)
        expect(page.get_by_role("tab", name="LoRA", exact=True)).to_be_visible()
    finally:
        _stop_app(app)
