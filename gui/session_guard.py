"""Default-deny for a GUI with a login: every route needs a session except what the login page needs.

Gradio checks the login on most of its routes, but not all (some validate the request body first,
some serve data without a user). With login on, this middleware answers 401 to any request without
a valid session cookie unless its path is in the short list below; new Gradio routes are closed
until someone decides they are public. The page itself, without a session, is our own login page
(`gui.login_page`): Gradio's embeds the description of every endpoint. Failed logins are throttled per
client address (`LoginThrottle`).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gui.login_page import login_page

# What answers before anyone is logged in: the login form's call and a few files that say nothing of the app.
PUBLIC_PATHS = frozenset({"/login", "/login/", "/logout", "/favicon.ico", "/robots.txt",
                          "/gradio_api/startup-events"})  # Gradio calls this itself at launch
PUBLIC_PREFIXES: tuple[str, ...] = ()

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


class LoginThrottle:
    """Failed logins per client address: the first FREE_TRIES are free; each further failure locks that address out
    for twice as long as the last (2 s up to 5 minutes). A success clears the count."""

    FREE_TRIES = 5
    MAX_LOCK_S = 300.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._failures: dict[str, tuple[int, float]] = {}  # address -> (failures in a row, locked until)
        self._lock = threading.Lock()

    def wait_s(self, address: str) -> float:
        """Seconds `address` must wait before its next try (0: it may try now)."""
        with self._lock:
            _, until = self._failures.get(address, (0, 0.0))
        return max(0.0, until - self.clock())

    def failed(self, address: str) -> None:
        with self._lock:
            count, _ = self._failures.get(address, (0, 0.0))
            count += 1
            lock = 0.0 if count <= self.FREE_TRIES else min(self.MAX_LOCK_S, 2.0 ** (count - self.FREE_TRIES))
            self._failures[address] = (count, self.clock() + lock)

    def succeeded(self, address: str) -> None:
        with self._lock:
            self._failures.pop(address, None)


class RequireSession:
    """ASGI middleware for Gradio's App: reads its tokens and cookie id, so it needs no setup of its own."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app
        self.throttle = LoginThrottle()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _is_login(scope):
            await self._login(scope, receive, send)
            return
        if scope["type"] not in ("http", "websocket") or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if app_path(scope) == "/" and scope.get("method") in ("GET", "HEAD"):
            message = getattr(getattr(scope["app"], "blocks", None), "auth_message", None) or "Log in to Atelier."
            await _reply(send, 200, login_page(message),
                         [(b"cache-control", b"no-store")], content_type=b"text/html; charset=utf-8")
            return
        await _reply(send, 401, b'{"detail":"Not authenticated: log in first."}')

    async def _login(self, scope: Scope, receive: Receive, send: Send) -> None:
        address = (scope.get("client") or ("unknown", 0))[0]
        wait = self.throttle.wait_s(address)
        if wait > 0:
            await _reply(send, 429, f'{{"detail":"Too many failed logins: try again in {wait:.0f} s."}}'.encode(),
                         [(b"retry-after", str(int(wait) + 1).encode())])
            return
        status: list[int] = []

        async def watch(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        await self.app(scope, receive, watch)
        if status and status[0] < 400:
            self.throttle.succeeded(address)
        elif status:
            self.throttle.failed(address)

    @staticmethod
    def _allowed(scope: Scope) -> bool:
        gradio_app = scope.get("app")
        if gradio_app is None or getattr(gradio_app, "auth", None) is None:
            return True  # no login configured: nothing to guard
        if is_public(app_path(scope)):
            return True
        return _session_user(scope, gradio_app) is not None


def app_path(scope: Scope) -> str:
    """The request's path inside the app (without a --root-path prefix)."""
    path, root = scope.get("path", "/"), scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root):] or "/"
    return path


def _is_login(scope: Scope) -> bool:
    if scope.get("method") != "POST" or getattr(scope.get("app"), "auth", None) is None:
        return False
    return app_path(scope).rstrip("/") == "/login"


async def _reply(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None,
                 content_type: bytes = b"application/json") -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


def _session_user(scope: Scope, gradio_app: Any) -> str | None:
    cookies: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        if name == b"cookie":
            for part in value.decode("latin-1").split(";"):
                key, _, val = part.strip().partition("=")
                cookies[key] = val
    cookie_id = gradio_app.cookie_id
    token = cookies.get(f"access-token-{cookie_id}") or cookies.get(f"access-token-unsecure-{cookie_id}")
    return gradio_app.tokens.get(token) if token else None
