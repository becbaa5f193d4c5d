"""Security headers on each kind of answer: the page, a static file, API JSON, an API error, SSE."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from web.headers import CONTENT_SECURITY_POLICY

from .asgi import Answer, Api, call, open_api
from .live_server import sqlite_url

pytestmark = pytest.mark.anyio


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with open_api(sqlite_url(tmp_path), tmp_path) as opened:
        yield opened


def security_headers(answer: Answer) -> dict[str, str]:
    names = ("content-security-policy", "x-content-type-options", "x-frame-options", "referrer-policy")
    return {name: answer.headers.get(name, "") for name in names}


EVERY_ANSWER = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
}


def test_the_policy_allows_this_origin_only_and_no_inline_script() -> None:
    directives = dict(d.split(" ", 1) for d in CONTENT_SECURITY_POLICY.split("; "))
    assert directives["script-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert directives["default-src"] == "'self'"
    assert "unsafe-inline" not in CONTENT_SECURITY_POLICY
    assert "unsafe-eval" not in CONTENT_SECURITY_POLICY


def test_the_page_has_no_inline_script_or_handler() -> None:
    # What the policy forbids would silently not run: the page must not need it.
    import re

    page = (Path(__file__).resolve().parent.parent / "web" / "static" / "index.html").read_text()
    scripts = re.findall(r"<script\b[^>]*>(.*?)</script>", page, flags=re.DOTALL | re.IGNORECASE)
    assert scripts
    assert all(not body.strip() for body in scripts)
    assert all(re.search(r"\bsrc=\"/static/", tag) for tag in re.findall(r"<script\b[^>]*>", page))
    assert not re.search(r"\son[a-z]+\s*=", page, flags=re.IGNORECASE)
    assert "javascript:" not in page.lower()


async def test_each_kind_of_answer_carries_the_headers(api: Api) -> None:
    auth = [(b"authorization", f"Bearer {api.token('headers')}".encode())]
    thread_id = (await api.client.post("/api/threads", json={}, headers=api.auth("headers"))).json()[
        "thread_id"
    ]
    page = await call(api.app, "GET", "/")
    static = await call(api.app, "GET", "/static/app.js")
    json_answer = await call(api.app, "GET", "/api/threads", headers=auth)
    api_error = await call(api.app, "GET", "/api/threads")
    stream = await call(api.app, "GET", f"/api/threads/{thread_id}/events", headers=auth)
    not_found = await call(api.app, "GET", "/no/such/page")
    health = await call(api.app, "GET", "/healthz")

    kinds = {
        "page": (page, "text/html"),
        "static": (static, "text/javascript"),
        "json": (json_answer, "application/json"),
        "api error": (api_error, "application/json"),
        "sse": (stream, "text/event-stream"),
        "404": (not_found, "application/json"),
        "healthz": (health, "application/json"),
    }
    for kind, (answer, media_type) in kinds.items():
        assert answer.headers["content-type"].startswith(media_type), kind
        assert security_headers(answer) == EVERY_ANSWER, kind
    assert (page.status, static.status, json_answer.status, api_error.status, stream.status) == (
        200,
        200,
        200,
        401,
        200,
    )
    # One user's data is never kept by a cache; the page and its files may be.
    for kind in ("json", "api error", "sse"):
        assert kinds[kind][0].headers["cache-control"] == "no-store", kind
    assert "no-store" not in page.headers.get("cache-control", "")
    assert "no-store" not in static.headers.get("cache-control", "")
