"""A GUI with a login: no route answers without a session, and files come only from the runs folder.

The app is served in this process exactly as app.py serves it (same launch options), and every route
Gradio registers is called without a session: a route added by a future Gradio is covered too.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import free_port

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
httpx = pytest.importorskip("httpx")

REPO = Path(__file__).resolve().parents[2]
SECRET_LOG = "loss=0.123 secret-marker-7f3a"
PASSWORD = "pa ss'wörd"


@contextlib.contextmanager
def _serve(base: Path, flags: list[str] = ()) -> Iterator[tuple[str, Path, object]]:
    """The app served in this process as app.py serves it (user `tester`), with app.py `flags`."""
    from app import launch_options, parse_args
    from gui.jobs import JobManager
    from gui.page import Services, build_page
    from gui.presets import Presets
    from gui.run_files import Watchers

    runs = base / "runs"
    (runs / "20260101-run-1").mkdir(parents=True)
    (runs / "20260101-run-1" / "train.log").write_text(SECRET_LOG, encoding="utf-8")
    port = free_port()
    args = parse_args(["--headless", "--server-port", str(port), "--runs-dir", str(runs), *flags])
    page = build_page(Services(runs, JobManager(runs), Presets(base / "presets"), Watchers(), [base]))
    page.queue()
    page.launch(**launch_options(args, [("tester", PASSWORD)], runs), prevent_thread_lock=True)
    try:
        yield f"http://127.0.0.1:{port}", runs, page.server_app
    finally:
        page.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, object]]:
    with _serve(tmp_path_factory.mktemp("exposed")) as app:
        yield app


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
        assert client.post("/login", data={"username": "tester", "password": PASSWORD}).status_code == 200
        app_page = client.get("/")
        assert app_page.status_code == 200 and len(app_page.content) > 50_000  # with a session: the app


def test_with_a_session_files_come_only_from_the_runs_folder(served) -> None:
    url, runs, _ = served
    log = runs / "20260101-run-1" / "train.log"
    with httpx.Client(base_url=url, timeout=20) as client:
        wrong = client.post("/login", data={"username": "tester", "password": "nope"})
        assert wrong.status_code in (400, 401)
        logged_in = client.post("/login", data={"username": "tester", "password": PASSWORD})
        assert logged_in.status_code == 200, logged_in.text
        assert client.get("/config").status_code == 200
        assert client.get(f"/gradio_api/file={log}").text == SECRET_LOG
        for outside in (REPO / "app.py", Path("/etc/passwd"), runs.parent / "presets",
                        runs / ".." / "runs" / ".." / "secret.txt"):
            assert client.get(f"/gradio_api/file={outside}").status_code in (403, 404), outside


def test_the_manual_is_served_behind_the_login_and_linked_from_the_page(served) -> None:
    url, _, _ = served
    with httpx.Client(base_url=url, timeout=20) as client:
        assert client.get("/manual/README.md").status_code == 401  # no session: nothing of it
        assert _login(client, PASSWORD)[0] == 200
        readme = client.get("/manual/README.md")
        assert readme.status_code == 200 and readme.headers["content-type"].startswith("text/html")
        assert 'id="the-gui"' in readme.text and 'href="docs/checkpoints.md"' in readme.text
        options = client.get("/manual/docs/options.md")
        assert options.status_code == 200 and "<td><code>logging_dir</code></td>" in options.text
        for outside in ("app.py", "../app.py", "docs/../app.py", "%2e%2e/app.py", "docs/missing.md", ""):
            assert client.get(f"/manual/{outside}").status_code == 404, outside
        links = re.findall(r"\(manual/([^)#]+)", client.get("/config").text)
        assert {"README.md", "docs/options.md"} <= set(links)  # the page's Docs row
        assert all(client.get(f"/manual/{link}").status_code == 200 for link in links)


def test_failed_logins_lock_a_username_from_an_address_and_slow_the_address() -> None:
    from gui.session_guard import LoginThrottle

    now = [0.0]
    throttle = LoginThrottle(clock=lambda: now[0])
    for _ in range(LoginThrottle.FREE_TRIES):
        throttle.failed("10.0.0.1", "tester")
    assert throttle.wait_s("10.0.0.1", "tester") == 0  # the first tries are free
    throttle.failed("10.0.0.1", "tester")
    assert throttle.wait_s("10.0.0.1", "tester") == 2
    assert throttle.wait_s("10.0.0.2", "tester") == 0 and throttle.wait_s("10.0.0.1", "other") == 0
    throttle.failed("10.0.0.1", "tester")
    assert throttle.wait_s("10.0.0.1", "tester") == 4
    throttle.succeeded("10.0.0.1", "tester")
    assert throttle.wait_s("10.0.0.1", "tester") == 0
    for n in range(LoginThrottle.ADDRESS_FREE_TRIES + 1):  # a failure each for many names: the address slows down
        throttle.failed("10.0.0.3", f"user{n}")
    assert throttle.wait_s("10.0.0.3") > 0 and throttle.wait_s("10.0.0.3", "tester") == 0
    assert [throttle.start_slow_check("10.0.0.3") for _ in range(3)] == [True, True, False]
    throttle.end_slow_check("10.0.0.3")
    assert throttle.start_slow_check("10.0.0.3")
    now[0] += LoginThrottle.FORGET_S + 1
    throttle.failed("10.0.0.1", "tester")
    assert throttle.wait_s("10.0.0.1", "tester") == 0  # a quarter of an hour later, the count starts again


def _login(client: "httpx.Client", password: str, username: str = "tester",
           forwarded_for: str | None = None) -> tuple[int, float]:
    """Status and seconds of one login, as a browser behind `forwarded_for` (a proxy's header) would send it."""
    headers = {"x-forwarded-for": forwarded_for} if forwarded_for else {}
    started = time.monotonic()
    status = client.post("/login", data={"username": username, "password": password}, headers=headers).status_code
    return status, time.monotonic() - started


def test_a_new_x_forwarded_for_each_try_does_not_escape_the_throttle(tmp_path: Path) -> None:
    from gui.session_guard import LoginThrottle

    tries = LoginThrottle.FREE_TRIES + 3
    with _serve(tmp_path) as (url, _, _), httpx.Client(base_url=url, timeout=30) as client:
        statuses = [_login(client, "wrong", forwarded_for=f"198.51.100.{n}")[0] for n in range(tries)]
        assert statuses == [400] * (LoginThrottle.FREE_TRIES + 1) + [429] * 2  # the peer counts, not the header
        answer = client.post("/login", data={"username": "tester", "password": PASSWORD},
                             headers={"x-forwarded-for": "198.51.100.99"})
        assert answer.status_code == 429 and int(answer.headers["retry-after"]) >= 1
        assert "try again in" in answer.json()["detail"]


def test_behind_a_trusted_proxy_each_client_has_its_own_throttle(tmp_path: Path) -> None:
    from gui.session_guard import LoginThrottle

    with _serve(tmp_path, ["--trusted-proxy", "127.0.0.1"]) as (url, _, _), \
            httpx.Client(base_url=url, timeout=30) as client:
        statuses = [_login(client, "wrong", forwarded_for="203.0.113.7")[0]
                    for _ in range(LoginThrottle.FREE_TRIES + 2)]
        assert statuses[-1] == 429
        assert _login(client, PASSWORD, forwarded_for="203.0.113.7")[0] == 429  # this client, this username: locked
        assert _login(client, PASSWORD, forwarded_for="203.0.113.8")[0] == 200  # another client of the proxy


def test_one_attacker_behind_a_shared_address_cannot_lock_out_a_right_password(tmp_path: Path) -> None:
    from gui.session_guard import DeviceCookies, LoginThrottle

    with _serve(tmp_path) as (url, _, _), httpx.Client(base_url=url, timeout=30) as client:
        for n in range(LoginThrottle.ADDRESS_FREE_TRIES + 1):  # guesses spread over usernames: none is locked
            assert _login(client, "wrong", username=f"admin{n}")[0] == 400
        status, seconds = _login(client, "wrong", username="root")
        assert status == 400 and seconds >= LoginThrottle.SLOW_CHECK_S  # the address is slowed down
        done = threading.Event()

        def attack(loop: int) -> None:  # issue 38's two loops of made-up usernames from 127.0.0.1
            with httpx.Client(base_url=url, timeout=30) as own:
                for n in itertools.count():
                    if done.is_set():
                        return
                    _login(own, "wrong", username=f"loop{loop}-{n}")

        loops = [threading.Thread(target=attack, args=(n,)) for n in range(2)]
        for loop in loops:
            loop.start()
        try:
            time.sleep(0.5)  # both loops hold a slow check
            answers = [_login(client, PASSWORD) for _ in range(2)]
        finally:
            done.set()
            for loop in loops:
                loop.join()
        assert [status for status, _ in answers] == [200, 200]  # a right password still gets in, every time
        assert answers[0][1] >= LoginThrottle.SLOW_CHECK_S  # slowed like every try from the address
        assert client.cookies.get(DeviceCookies.NAME)  # then this browser's tries count as its own
        assert answers[1][1] < LoginThrottle.SLOW_CHECK_S


def test_upload_and_proxy_flags_read_sizes_and_addresses_and_name_bad_values(capsys: pytest.CaptureFixture) -> None:
    from app import parse_args, upload_limits

    args = parse_args(["--max-upload-size", "500MB", "--max-unpacked-size", "1.5GiB", "--max-upload-files", "10",
                       "--max-unzip-ratio", "20", "--trusted-proxy", "10.0.0.0/8", "--trusted-proxy", "::1"])
    limits = upload_limits(args)
    assert (limits.max_upload_bytes, limits.max_unpacked_bytes, limits.max_files, limits.max_ratio) == (
        500 << 20, 3 << 29, 10, 20.0)
    assert args.trusted_proxies == ["10.0.0.0/8", "::1/128"]
    assert parse_args([]).trusted_proxies == []  # nobody's X-Forwarded-For is believed
    for flag, value in (("--max-upload-size", "5XB"), ("--max-upload-files", "0"), ("--trusted-proxy", "proxy")):
        with pytest.raises(SystemExit):
            parse_args([flag, value])
        assert f"argument {flag}: got {value!r}" in capsys.readouterr().err


def test_an_upload_larger_than_max_upload_size_is_refused_as_it_arrives(tmp_path: Path) -> None:
    with _serve(tmp_path, ["--max-upload-size", "64KB"]) as (url, _, _), \
            httpx.Client(base_url=url, timeout=30) as client:
        assert _login(client, PASSWORD)[0] == 200
        small = client.post("/gradio_api/upload", files={"files": ("a.png", b"x" * (10 << 10), "image/png")})
        assert small.status_code == 200, small.text
        large = client.post("/gradio_api/upload", files={"files": ("b.png", b"x" * (100 << 10), "image/png")})
        assert large.status_code == 413, large.text


@pytest.mark.slow
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
            assert client.post("/login", data={"username": "tester", "password": PASSWORD}).status_code == 200
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
