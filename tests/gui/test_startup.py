"""The GUI starts on a busy machine: Gradio's one-shot startup check (3 s) is asked again until the server answers."""
from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator

import pytest

from helpers import free_port


@pytest.fixture
def slow_first_answer() -> Iterator[Callable[[], str]]:
    """New servers whose first answer takes 4 s each (as a new server's on a machine whose cores a run is using)."""
    servers = []

    def serve() -> str:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _handler())
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/"

    try:
        yield serve
    finally:
        for server in servers:
            server.shutdown()


def _handler() -> type[http.server.BaseHTTPRequestHandler]:
    answered: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
            if not answered:
                threading.Event().wait(4)
            answered.append(1)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def test_a_late_first_answer_does_not_stop_the_gui_from_starting(slow_first_answer: Callable[[], str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import gradio.networking as networking

    from app import patient_startup_check

    gradio_own = getattr(networking.url_ok, "quick", networking.url_ok)  # another test may have launched the app
    monkeypatch.setattr(networking, "url_ok", gradio_own)  # restored after the test
    assert not networking.url_ok(slow_first_answer())  # gradio alone gives up: "localhost is not accessible"
    patient_startup_check(wait_s=20)
    assert networking.url_ok(slow_first_answer())
