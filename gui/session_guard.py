"""Default-deny for a GUI with a login: every route needs a session except what the login page needs.

Gradio checks the login on most of its routes, but not all (some validate the request body first,
some serve data without a user). With login on, this middleware answers 401 to any request without
a valid session cookie unless its path is in the short list below; new Gradio routes are closed
until someone decides they are public. The page itself, without a session, is our own login page
(`gui.login_page`): Gradio's embeds the description of every endpoint. Failed logins are throttled per
client address and username (`LoginThrottle`), and per browser for one that logged in before (`DeviceCookies`). The client address is the peer that connected, unless app.py's
--trusted-proxy names that peer as a reverse proxy: then uvicorn takes it from X-Forwarded-For (app.py sets
FORWARDED_ALLOW_IPS; uvicorn's default trusts the header from 127.0.0.1, so any local process could name a new
address for every try).
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gui.login_page import login_page

# What answers before anyone is logged in: the login form's call and a few files that say nothing of the app.
PUBLIC_PATHS = frozenset({"/login", "/login/", "/logout", "/favicon.ico", "/robots.txt",
                          "/gradio_api/startup-events"})  # Gradio calls this itself at launch
PUBLIC_PREFIXES: tuple[str, ...] = ()

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
TEXT_PLAIN = b"text/plain; charset=utf-8"


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


@dataclass
class _Failures:
    count: int = 0  # failed logins in a row
    until: float = 0.0  # locked until this time of the throttle's clock
    last: float = 0.0  # when the last one failed


class LoginThrottle:
    """Failed logins, counted per (client address, username) and per client address.

    A username from an address: the first FREE_TRIES failures are free; each further one locks that username out
    from that address for twice as long as the last (2 s up to 5 minutes), and tries during the lock are refused
    unchecked: brute force on one username stays slow. An address, whatever the usernames: after
    ADDRESS_FREE_TRIES failures it is locked the same way, but a try during that lock is checked after
    SLOW_CHECK_S: a right password gets in, a wrong one counts. The places for such checks (SLOW_CHECKS at once)
    are kept per account, and all usernames that are no account share one set: guesses with made-up usernames
    (two loops of them from 127.0.0.1, where every --share visitor comes from) never take an account's place, so
    its right password is slowed but never refused. A success clears the count of that username from that address;
    a count is forgotten FORGET_S after its last failure.
    """

    FREE_TRIES = 5
    ADDRESS_FREE_TRIES = 20
    MAX_LOCK_S = 300.0
    SLOW_CHECK_S = 2.0
    SLOW_CHECKS = 2
    FORGET_S = 900.0
    MAX_TRACKED = 10_000  # keys kept; the oldest unlocked ones go first (a flood of made-up usernames)

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.clock, self.sleep = clock, sleep  # sleep: how a slow check waits (a test's fake clock advances)
        self._failures: dict[tuple[str, str | None], _Failures] = {}  # (address, username or None: any) -> count
        self._slow_checks: dict[tuple[str, str | None], int] = {}  # (address, account or None: no account) -> waiting
        self._lock = threading.Lock()

    def wait_s(self, address: str, username: str | None = None) -> float:
        """Seconds before `username` may try again from `address` (username None: the address's own lock)."""
        with self._lock:
            until = self._failures.get((address, username), _Failures()).until
        return max(0.0, until - self.clock())

    def failed(self, address: str, username: str) -> None:
        now = self.clock()
        with self._lock:
            for key, free in (((address, username), self.FREE_TRIES), ((address, None), self.ADDRESS_FREE_TRIES)):
                entry = self._failures.setdefault(key, _Failures())
                if now - entry.last > self.FORGET_S:
                    entry.count = 0
                entry.count += 1
                entry.last = now
                if entry.count > free:
                    entry.until = now + min(self.MAX_LOCK_S, 2.0 ** (entry.count - free))
            self._forget_old(now)

    def succeeded(self, address: str, username: str) -> None:
        with self._lock:
            self._failures.pop((address, username), None)

    def start_slow_check(self, address: str, account: str | None = None) -> bool:
        """Hold one of the slow-check places of `account` from `address` (None: those that usernames which are no
        account share); False when they are all taken."""
        key = (address, account)
        with self._lock:
            if self._slow_checks.get(key, 0) >= self.SLOW_CHECKS:
                return False
            self._slow_checks[key] = self._slow_checks.get(key, 0) + 1
            return True

    def end_slow_check(self, address: str, account: str | None = None) -> None:
        key = (address, account)
        with self._lock:
            left = self._slow_checks.pop(key, 1) - 1
            if left:
                self._slow_checks[key] = left

    def _forget_old(self, now: float) -> None:
        if len(self._failures) <= self.MAX_TRACKED:
            return
        by_age = sorted(self._failures.items(), key=lambda item: (item[1].until > now, item[1].last))
        for key, _ in by_age[:len(self._failures) - self.MAX_TRACKED]:
            del self._failures[key]


class DeviceCookies:
    """Browsers that logged in before (OWASP's "device cookies"): a right password gives the browser a cookie that
    names it and the username, signed with a key of this GUI process. Its tries for that username are throttled as
    its own, not by the address, so guesses from the same address (every --share visitor is 127.0.0.1) at the same
    username lock out only the guesser; a wrong password with the cookie counts against that browser alone."""

    NAME = "atelier-device"
    MAX_AGE_S = 365 * 86400

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)  # a restarted GUI forgets every browser: they fall back to the address

    def device(self, scope: Scope, username: str) -> str | None:
        """The browser's id when its cookie is one this GUI gave it for `username`."""
        device, _, signature = _cookies(scope).get(self.NAME, "").partition(".")
        return device if device and hmac.compare_digest(signature, self._sign(device, username)) else None

    def header(self, scope: Scope, username: str, device: str | None) -> tuple[bytes, bytes]:
        """The set-cookie header of a right password (a new id for a browser that had none)."""
        device = device or secrets.token_urlsafe(16)
        secure = "; Secure" if scope.get("scheme") in ("https", "wss") else ""
        cookie = (f"{self.NAME}={device}.{self._sign(device, username)}; Path=/; Max-Age={self.MAX_AGE_S}; HttpOnly; "
                  f"SameSite=Strict{secure}")
        return b"set-cookie", cookie.encode()

    def _sign(self, device: str, username: str) -> str:
        return hmac.new(self._key, f"{device}\0{username}".encode(), hashlib.sha256).hexdigest()


class RequireSession:
    """ASGI middleware for Gradio's App: reads its tokens and cookie id, so it needs no setup of its own."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app
        self.throttle = LoginThrottle()
        self.devices = DeviceCookies()

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
            await reply(send, 200, login_page(message),
                         [(b"cache-control", b"no-store")], content_type=b"text/html; charset=utf-8")
            return
        await reply(send, 401, b'{"detail":"Not authenticated: log in first."}')

    async def _login(self, scope: Scope, receive: Receive, send: Send) -> None:
        address = (scope.get("client") or ("unknown", 0))[0]  # the peer, or what a --trusted-proxy says it is
        body = await _read_body(receive, MAX_LOGIN_BODY)
        if body is None:
            await reply(send, 413, b'{"detail":"The login form is too large."}')
            return
        username = await _username(scope, body)
        device = self.devices.device(scope, username)
        source = f"browser {device}" if device else address  # whose failures count
        wait = self.throttle.wait_s(source, username)
        if wait > 0:
            await _too_many(send, wait, "for this username from " + ("this browser" if device else "your address"))
            return
        slow = not device and self.throttle.wait_s(address) > 0
        account = username if _is_account(scope, username) else None
        if slow and not self.throttle.start_slow_check(address, account):
            await _too_many(send, self.throttle.SLOW_CHECK_S, "from your address")
            return
        status: list[int] = []

        async def watch(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
                if status[0] < 400:
                    message = {**message, "headers": [*message.get("headers", []),
                                                      self.devices.header(scope, username, device)]}
            await send(message)

        try:
            if slow:
                await self.throttle.sleep(self.throttle.SLOW_CHECK_S)
            await self.app(scope, _replay(body, receive), watch)
        finally:
            if slow:
                self.throttle.end_slow_check(address, account)
        if status and status[0] < 400:
            self.throttle.succeeded(source, username)
        elif status:
            self.throttle.failed(source, username)

    @staticmethod
    def _allowed(scope: Scope) -> bool:
        gradio_app = scope.get("app")
        if gradio_app is None or getattr(gradio_app, "auth", None) is None:
            return True  # no login configured: nothing to guard
        if is_public(app_path(scope)):
            return True
        return _session_user(scope, gradio_app) is not None


MAX_LOGIN_BODY = 64 << 10


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The request's whole body; None when it is larger than `limit` bytes."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if message["type"] != "http.request" or not message.get("more_body"):
            return body


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives `body` once more, then what the client sends next (its disconnect)."""
    sent = False

    async def again() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again


async def _username(scope: Scope, body: bytes) -> str:
    """The form's username as Gradio's /login reads it (stripped), urlencoded or multipart."""
    from starlette.requests import Request

    async def nothing_more() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    try:
        form = await Request(scope, _replay(body, nothing_more)).form()
    except Exception:  # a malformed form: Gradio answers it; the throttle counts it under no name
        return ""
    value = form.get("username")
    return value.strip()[:256] if isinstance(value, str) else ""


def _is_account(scope: Scope, username: str) -> bool:
    """Whether `username` is one of the login's accounts (Gradio keeps them as a dict; a login function: unknown)."""
    accounts = getattr(scope.get("app"), "auth", None)
    return isinstance(accounts, dict) and username in accounts


async def _too_many(send: Send, wait_s: float, whose: str) -> None:
    detail = f"Too many failed logins {whose}: try again in {max(1, round(wait_s))} s."
    await reply(send, 429, f'{{"detail":"{detail}"}}'.encode(), [(b"retry-after", str(int(wait_s) + 1).encode())])


class PrefixMiddleware:
    """ASGI middleware that answers HTTP requests under `prefix` itself (`handle`, with the rest of the path) and
    passes everything else on to the app."""

    prefix = "/"

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = app_path(scope)
        if scope["type"] != "http" or not path.startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        await self.handle(scope, receive, send, path[len(self.prefix):])

    async def handle(self, scope: Scope, receive: Receive, send: Send, rest: str) -> None:
        raise NotImplementedError


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


async def reply(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None,
                 content_type: bytes = b"application/json") -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


def _cookies(scope: Scope) -> dict[str, str]:
    cookies: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        if name == b"cookie":
            for part in value.decode("latin-1").split(";"):
                key, _, val = part.strip().partition("=")
                cookies[key] = val
    return cookies


def _session_user(scope: Scope, gradio_app: Any) -> str | None:
    cookies = _cookies(scope)
    cookie_id = gradio_app.cookie_id
    token = cookies.get(f"access-token-{cookie_id}") or cookies.get(f"access-token-unsecure-{cookie_id}")
    return gradio_app.tokens.get(token) if token else None
