"""Default-deny for a GUI with a login: every route needs a session except what the login page needs.

Gradio checks the login on most of its routes, but not all (some validate the request body first,
some serve data without a user). With login on, this middleware answers 401 to any request without
a valid session cookie unless its path is in the short list below; new Gradio routes are closed
until someone decides they are public.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

# What the login page loads before anyone is logged in: the page, its assets, the login form's calls.
PUBLIC_PATHS = frozenset({
    "/", "/login", "/login/", "/logout", "/favicon.ico", "/theme.css", "/robots.txt", "/manifest.json",
    "/gradio_api/theme.css", "/gradio_api/login_check", "/gradio_api/login_check/", "/gradio_api/user",
    "/gradio_api/user/", "/gradio_api/token", "/gradio_api/token/", "/gradio_api/app_id", "/gradio_api/app_id/",
    "/gradio_api/startup-events",
})
PUBLIC_PREFIXES = ("/assets/", "/static/", "/svelte/", "/pwa_icon")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


class RequireSession:
    """ASGI middleware for Gradio's App: reads its tokens and cookie id, so it needs no setup of its own."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = b'{"detail":"Not authenticated: log in first."}'
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    @staticmethod
    def _allowed(scope: Scope) -> bool:
        gradio_app = scope.get("app")
        if gradio_app is None or getattr(gradio_app, "auth", None) is None:
            return True  # no login configured: nothing to guard
        path = scope.get("path", "/")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):] or "/"
        if is_public(path):
            return True
        return _session_user(scope, gradio_app) is not None


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
