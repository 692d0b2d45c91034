"""TensorBoard from the page: one TensorBoard process per logging_dir, started on demand and served through the
GUI's own address under /tensorboard/<key>/, so a --listen or --share user reaches it behind the same login.

TensorBoard listens on 127.0.0.1 only, with `--path_prefix /tensorboard/<key>`; `TensorBoardProxy` (ASGI
middleware, inside the session guard) forwards requests under that prefix to it. Each TensorBoard runs without the
GUI's secrets in its environment, and stops with the GUI (app.py calls `stop_all` at exit): on 127.0.0.1 it would
answer anyone on this machine without a login.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from gui.session_guard import TEXT_PLAIN, PrefixMiddleware, Receive, Scope, Send, app_path, reply
from trainers.core.secrets import child_environment

PREFIX = "/tensorboard/"



def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TensorBoards:
    """The TensorBoard processes this GUI started, by key (a hash of the log folder)."""

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python
        self._running: dict[str, tuple[int, subprocess.Popen]] = {}
        self._lock = threading.Lock()

    def ensure(self, logdir: Path) -> str:
        """Start a TensorBoard for `logdir` unless one runs; its key (the URL is PREFIX + key + '/')."""
        logdir = Path(logdir).expanduser().resolve()
        key = hashlib.sha1(str(logdir).encode("utf-8", "surrogateescape")).hexdigest()[:12]
        with self._lock:
            running = self._running.get(key)
            if running is not None and running[1].poll() is None:
                return key
            port = _free_port()
            argv = [self.python, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
                    "--port", str(port), "--path_prefix", f"{PREFIX}{key}", "--reload_interval", "15"]
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    stdin=subprocess.DEVNULL, env=child_environment(os.environ),
                                    start_new_session=True)
            self._running[key] = (port, proc)
            return key

    def port(self, key: str) -> int | None:
        with self._lock:
            running = self._running.get(key)
        return running[0] if running is not None and running[1].poll() is None else None

    def stop_all(self, grace_s: float = 5.0) -> None:
        """Stop every TensorBoard (and what it started, e.g. its data server): SIGTERM, SIGKILL after `grace_s`."""
        with self._lock:
            procs = [proc for _, proc in self._running.values()]
            self._running.clear()
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
            deadline = time.monotonic() + wait_s
            for proc in procs:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, sig)  # its own session: the group's id is its pid, and holds its children
            for proc in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))


TENSORBOARDS = TensorBoards()


class TensorBoardProxy(PrefixMiddleware):
    """ASGI middleware: requests under /tensorboard/<key>/ go to that TensorBoard; everything else to the app."""

    prefix = PREFIX

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]],
                 boards: TensorBoards = TENSORBOARDS) -> None:
        super().__init__(app)
        self.boards = boards

    async def handle(self, scope: Scope, receive: Receive, send: Send, rest: str) -> None:
        port = self.boards.port(rest.split("/", 1)[0])
        if port is None:
            await reply(send, 404, b"No TensorBoard runs here: press TensorBoard on the run panel to start it.",
                        content_type=TEXT_PLAIN)
            return
        await self._forward(scope, receive, send, f"http://127.0.0.1:{port}{app_path(scope)}")

    @staticmethod
    async def _forward(scope: Scope, receive: Receive, send: Send, url: str) -> None:
        import httpx

        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        query = scope.get("query_string", b"").decode("latin-1")
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() not in (b"host", b"cookie")]
        async with httpx.AsyncClient(timeout=60) as client:
            try:
                answer = await client.request(scope["method"], url + (f"?{query}" if query else ""), headers=headers,
                                              content=body)
            except httpx.HTTPError:
                await reply(send, 502, b"TensorBoard is starting (or stopped): reload in a few seconds.",
                            content_type=TEXT_PLAIN)
                return
        kept = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers.items()
                if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding")]
        content = answer.content
        await send({"type": "http.response.start", "status": answer.status_code,
                    "headers": kept + [(b"content-length", str(len(content)).encode())]})
        await send({"type": "http.response.body", "body": content})
