"""A GUI with a login: no route answers without a session, and files come only from the runs folder.

The app is served in this process exactly as app.py serves it (same launch options), and every route
Gradio registers is called without a session: a route added by a future Gradio is covered too.
"""
from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import free_port

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
httpx = pytest.importorskip("httpx")

REPO = Path(__file__).resolve().parents[2]
SECRET_LOG = "loss=0.123 secret-marker-7f3a"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, object]]:
    from app import launch_options, parse_args
    from gui.jobs import JobManager
    from gui.page import Services, build_page
    from gui.presets import Presets
    from gui.run_files import Watchers

    base = tmp_path_factory.mktemp("exposed")
    runs = base / "runs"
    (runs / "20260101-run-1").mkdir(parents=True)
    (runs / "20260101-run-1" / "train.log").write_text(SECRET_LOG, encoding="utf-8")
    port = free_port()
    args = parse_args(["--headless", "--server-port", str(port), "--runs-dir", str(runs)])
    page = build_page(Services(runs, JobManager(runs), Presets(base / "presets"), Watchers(), [base]))
    page.queue()
    page.launch(**launch_options(args, [("tester", "pa ss'wörd")], runs), prevent_thread_lock=True)
    try:
        yield f"http://127.0.0.1:{port}", runs, page.server_app
    finally:
        page.close()


def _routes(routes: list, prefix: str = "") -> Iterator[tuple[str, str]]:
    for route in routes:
        if hasattr(route, "original_router"):  # an included router (the /gradio_api routes)
            yield from _routes(route.original_router.routes, prefix + route.include_context.prefix)
        else:
            for method in sorted(getattr(route, "methods", None) or ["GET"]):
                if method != "HEAD":
                    yield method, prefix + route.path


def _concrete(path: str, file: Path) -> str:
    path = re.sub(r"\{path_or_url:path\}", str(file), path)
    return re.sub(r"\{[^}]+\}", "1", path)


def _call(client: "httpx.Client", method: str, path: str) -> tuple[int, str]:
    """Status and the start of the body; event streams (heartbeats, queues) are not read to their end."""
    request = client.build_request(method, path, json={} if method == "POST" else None)
    response = client.send(request, stream=True)
    try:
        body = b""
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > 65536 or "event-stream" in response.headers.get("content-type", ""):
                break
        return response.status_code, body.decode("utf-8", "replace")
    finally:
        response.close()


def test_every_route_needs_a_session(served) -> None:
    from gui.session_guard import is_public

    url, runs, server_app = served
    log = runs / "20260101-run-1" / "train.log"
    routes = sorted(set(_routes(server_app.routes)))
    assert len(routes) > 40  # the walk reached Gradio's API routes, not just the page
    open_routes = []
    with httpx.Client(base_url=url, timeout=20, follow_redirects=False) as client:
        for method, path in routes:
            status, text = _call(client, method, _concrete(path, log))
            assert SECRET_LOG not in text and "20260101-run-1" not in text, (method, path)
            if status not in (401, 403):
                open_routes.append((method, path, status))
        # files of a run, by every spelling, are refused without a session
        for file_url in (f"/gradio_api/file={log}", f"/gradio_api/file/{log}", f"/file={log}"):
            assert client.get(file_url).status_code in (401, 403, 404), file_url
    unexpected = [r for r in open_routes if not is_public(r[1]) and r[1] != "/"]  # "/" is the login page
    assert not unexpected, f"routes answering without a session: {unexpected}"
    assert all(status < 500 for *_, status in open_routes), open_routes


def test_without_a_session_the_page_is_a_login_form_carrying_nothing_of_the_app(served) -> None:
    url, runs, _ = served
    with httpx.Client(base_url=url, timeout=20) as client:
        page = client.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        text = page.text
        assert len(page.content) < 8_000  # Gradio's own login screen was ~740 KB: the app and every endpoint
        assert 'type="password"' in text and "Atelier: please log in." in text
        for leak in ("gradio_api", "dependencies", "components", "/predict", str(runs), "20260101-run-1",
                     "learning_rate", "network_dim"):
            assert leak not in text, leak
        assert client.post("/login", data={"username": "tester", "password": "pa ss'wörd"}).status_code == 200
        app_page = client.get("/")
        assert app_page.status_code == 200 and len(app_page.content) > 50_000  # with a session: the app


def test_with_a_session_files_come_only_from_the_runs_folder(served) -> None:
    url, runs, _ = served
    log = runs / "20260101-run-1" / "train.log"
    with httpx.Client(base_url=url, timeout=20) as client:
        wrong = client.post("/login", data={"username": "tester", "password": "nope"})
        assert wrong.status_code in (400, 401)
        logged_in = client.post("/login", data={"username": "tester", "password": "pa ss'wörd"})
        assert logged_in.status_code == 200, logged_in.text
        assert client.get("/config").status_code == 200
        assert client.get(f"/gradio_api/file={log}").text == SECRET_LOG
        for outside in (REPO / "app.py", Path("/etc/passwd"), runs.parent / "presets",
                        runs / ".." / "runs" / ".." / "secret.txt"):
            assert client.get(f"/gradio_api/file={outside}").status_code in (403, 404), outside


def test_failed_logins_are_throttled_per_address() -> None:
    import asyncio
    from types import SimpleNamespace

    from gui.session_guard import LoginThrottle, RequireSession

    now = [0.0]
    throttle = LoginThrottle(clock=lambda: now[0])
    for _ in range(LoginThrottle.FREE_TRIES):
        throttle.failed("10.0.0.1")
    assert throttle.wait_s("10.0.0.1") == 0  # the first tries are free
    throttle.failed("10.0.0.1")
    assert throttle.wait_s("10.0.0.1") == 2 and throttle.wait_s("10.0.0.2") == 0
    throttle.failed("10.0.0.1")
    assert throttle.wait_s("10.0.0.1") == 4
    throttle.succeeded("10.0.0.1")
    assert throttle.wait_s("10.0.0.1") == 0

    async def wrong_password(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 400, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    guard = RequireSession(wrong_password)
    app = SimpleNamespace(auth=[("u", "p")])
    statuses: list[int] = []

    async def attempt() -> None:
        async def send(message) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        scope = {"type": "http", "method": "POST", "path": "/login", "app": app, "client": ("10.0.0.9", 1)}
        await guard(scope, None, send)

    for _ in range(50):
        asyncio.run(attempt())
    assert statuses[:LoginThrottle.FREE_TRIES + 1] == [400] * (LoginThrottle.FREE_TRIES + 1)
    assert statuses.count(429) >= 40  # 50 wrong passwords in a burst: almost all refused unanswered


def test_tensorboard_is_served_under_the_gui_behind_its_login(served, tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    from gui.tensorboard import TENSORBOARDS

    url, _, _ = served
    logdir = tmp_path / "logs é"
    with SummaryWriter(str(logdir / "my-run")) as writer:
        for step in range(3):
            writer.add_scalar("loss", 1.0 / (step + 1), step)
    key = TENSORBOARDS.ensure(logdir)
    try:
        with httpx.Client(base_url=url, timeout=20) as client:
            assert client.get(f"/tensorboard/{key}/").status_code == 401  # no session: nothing of it
            assert client.post("/login", data={"username": "tester", "password": "pa ss'wörd"}).status_code == 200
            deadline = time.monotonic() + 90
            runs = None
            while time.monotonic() < deadline:
                answer = client.get(f"/tensorboard/{key}/data/runs")
                if answer.status_code == 200 and "my-run" in answer.text:
                    runs = answer.json()
                    break
                time.sleep(1)
            assert runs == ["my-run"]
            assert "<" in client.get(f"/tensorboard/{key}/").text  # its page
            assert client.get("/tensorboard/unknown/").status_code == 404
    finally:
        TENSORBOARDS.stop_all()
