"""Security headers on every answer: the page, its files, the API and its event streams.

The Content-Security-Policy lets the page load scripts, styles, images and fonts from this origin
only (`/static/`), talk to this origin only, and never run inline script or handlers, be framed,
or post a form elsewhere. API answers are never cached (`no-store`): they are one user's data.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .auth import API_PREFIX

__all__ = ("CONTENT_SECURITY_POLICY", "SecurityHeaders")

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        # blob: the page shows a thread's images from the bytes it fetched with the token (an <img> cannot send it).
        "img-src 'self' data: blob:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)

_EVERY_ANSWER = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


class SecurityHeaders:
    """Adds the headers above to every HTTP answer, and `Cache-Control: no-store` under `/api/`; an API
    answer with a policy of its own (a file download's `sandbox`) keeps it."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        api = str(scope["path"]).startswith(API_PREFIX)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                sandboxed = headers.get("Content-Security-Policy") if api else None
                for name, value in _EVERY_ANSWER.items():
                    headers[name] = value
                if sandboxed is not None:
                    # A downloaded file runs nothing and reaches nothing, whatever it holds.
                    headers["Content-Security-Policy"] = sandboxed
                if api:
                    headers["Cache-Control"] = "no-store"
            await send(message)

        await self._app(scope, receive, send_with_headers)
