"""What the GUI starts besides training runs (TensorBoard) gets none of its secrets and ends with it.

A real `app.py` process, with secrets in its environment; its TensorBoard is started through the run panel's
button endpoint for a run that never set logging_dir (it logged into its run folder's logs/).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import free_port
from trainers.core.options import load_config
from trainers.core.processes import pid_alive

httpx = pytest.importorskip("httpx")

REPO = Path(__file__).resolve().parents[2]
SECRETS = {"ATELIER_PASSWORD": "gui-login-5f1e9a", "WANDB_API_KEY": "wandb-key-77c2d0", "HF_TOKEN": "hf_token_41b3aa",
           "AWS_SECRET_ACCESS_KEY": "aws-secret-9e0f12"}


def _processes(field: int, value: int) -> list[int]:
    """Processes whose /proc stat field (after the name: 1 = parent, 2 = process group) is `value`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[field]) == value:
                found.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _tensorboards(parent: int) -> list[int]:
    """The TensorBoards `parent` started, once they run TensorBoard (before, /proc shows the parent's environment)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        started = [pid for pid in _processes(1, parent) if b"tensorboard.main" in _cmdline(pid)]
        if started:
            return started
        time.sleep(0.1)
    return []


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _assert_no_secrets(pid: int) -> None:
    environ = Path(f"/proc/{pid}/environ").read_bytes().decode("utf-8", "replace")
    assert "PATH=" in environ
    for name, value in SECRETS.items():
        assert name not in environ and value not in environ, name


@pytest.mark.slow
def test_tensorboard_gets_none_of_the_guis_secrets_and_stops_with_its_children(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gui.tensorboard import TensorBoards

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    boards = TensorBoards()
    boards.ensure(tmp_path)
    try:
        [board] = _tensorboards(os.getpid())
        _assert_no_secrets(board)
    finally:
        boards.stop_all()
    assert not pid_alive(board) and not _processes(2, board)  # nor anything it started (its data server)


def _tensorboard_link(client: "httpx.Client", run_id: str) -> str:
    """What the run panel's TensorBoard button shows for `run_id` (its API endpoint, as the page calls it)."""
    event = client.post("/gradio_api/call/tensorboard", json={"data": [run_id]}).json()["event_id"]
    stream = client.get(f"/gradio_api/call/tensorboard/{event}").text
    return json.loads(stream.split("event: complete\ndata:", 1)[1].strip())[0]


@pytest.mark.slow
def test_tensorboard_opens_without_logging_dir_gets_no_secrets_and_stops_with_the_gui(tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    runs = tmp_path / "runs"
    run = runs / "20260101-000000-shapes"
    run.mkdir(parents=True)
    load_config("lora").save(run / "config.toml")  # logging_dir unset: the trainer logged into run/logs/
    with SummaryWriter(str(run / "logs" / run.name)) as writer:
        writer.add_scalar("loss", 0.5, 1)
    # a run of an earlier GUI, still training in its own session: it must outlive this GUI
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    port = free_port()
    env = {**os.environ, **SECRETS, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    with open(tmp_path / "app.log", "wb") as log:
        app = subprocess.Popen([sys.executable, "app.py", "--headless", "--server-port", str(port), "--runs-dir",
                                str(runs)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if app.poll() is not None:
                    pytest.fail(f"app.py exited before serving:\n{(tmp_path / 'app.log').read_text()}")
                try:
                    if client.get("/").status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.5)
            link = _tensorboard_link(client, run.name)
            assert "Open TensorBoard" in link and str(run / "logs") in link, link
            boards = _tensorboards(app.pid)
            assert len(boards) == 1
            _assert_no_secrets(boards[0])

        app.send_signal(signal.SIGTERM)
        app.wait(timeout=60)
        deadline = time.monotonic() + 15
        while pid_alive(boards[0]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not pid_alive(boards[0]), "TensorBoard outlived the GUI"
        assert pid_alive(trainer.pid), "a training run was stopped with the GUI"
    finally:
        app.kill()
        trainer.kill()
        trainer.wait()
