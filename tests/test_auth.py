"""Who a request comes from: the built-in tokens' header rules, and your own `authenticate` callable."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from starlette.requests import Request

from web.auth import Authenticate
from web.errors import ApiError

from .asgi import call, error_of, open_api
from .live_server import sqlite_url

pytestmark = pytest.mark.anyio


def by_header(request: Request) -> str | None:
    """Signs in whoever the (trusted, in this test) `X-User` header names."""
    return request.headers.get("x-user")


async def by_header_async(request: Request) -> str | None:
    return request.headers.get("x-user")


def refusing(request: Request) -> str | None:
    if request.headers.get("x-user") == "boom":
        raise RuntimeError("the directory service broke")
    if request.headers.get("x-user") == "down":
        raise ApiError(503, "directory_unavailable", "the directory is down", headers={"Retry-After": "1"})
    return request.headers.get("x-user") or None


@pytest.mark.parametrize("authenticate", [by_header, by_header_async], ids=["sync", "async"])
async def test_your_callable_names_the_user(tmp_path: Path, authenticate: Authenticate) -> None:
    async with open_api(sqlite_url(tmp_path), tmp_path, authenticate=authenticate) as api:
        created = await api.client.post("/api/threads", json={}, headers={"X-User": "ada"})
        assert created.status_code == 201
        assert (await api.client.get("/api/threads", headers={"X-User": "grace"})).json()["threads"] == []
        mine = (await api.client.get("/api/threads", headers={"X-User": "ada"})).json()["threads"]
        assert [t["thread_id"] for t in mine] == [created.json()["thread_id"]]
        # The built-in tokens mean nothing to it.
        refused = await api.client.get("/api/threads", headers=api.auth("ada"))
        assert error_of(refused.status_code, refused.content) == (401, "unauthenticated")


async def test_none_or_an_exception_is_a_401_and_an_api_error_is_answered_as_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_api(sqlite_url(tmp_path), tmp_path, authenticate=refusing) as api:
        cases = {
            "nobody": ({}, (401, "unauthenticated")),
            "raises": ({"X-User": "boom"}, (401, "unauthenticated")),
            "answers its own error": ({"X-User": "down"}, (503, "directory_unavailable")),
            "a NUL in the name": ({"X-User": "a\x00b"}, (401, "invalid_token")),
            "too long a name": ({"X-User": "x" * 256}, (401, "invalid_token")),
            "accepted": ({"X-User": "ada"}, (200, "")),
        }
        found: dict[str, tuple[int, str]] = {}
        with caplog.at_level(logging.DEBUG, logger="web.auth"):
            for name, (headers, _) in cases.items():
                raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
                answer = await call(api.app, "GET", "/api/threads", headers=raw)
                found[name] = (200, "") if answer.status == 200 else error_of(answer.status, answer.body)
        assert found == {name: expected for name, (_, expected) in cases.items()}
        # A failing callable is noted for the operator at DEBUG only: anyone can make it fail.
        [noted] = [r for r in caplog.records if r.name == "web.auth"]
        assert (noted.levelname, noted.exc_info is not None) == ("DEBUG", True)
        # Two Authorization headers are ambiguous whoever authenticates.
        twice = await call(
            api.app,
            "GET",
            "/api/threads",
            headers=[(b"x-user", b"ada"), (b"authorization", b"Bearer a"), (b"authorization", b"Bearer b")],
        )
        assert error_of(twice.status, twice.body) == (400, "ambiguous_credentials")


async def test_only_the_api_is_authenticated(tmp_path: Path) -> None:
    calls: list[str] = []

    def counting(request: Request) -> str | None:
        calls.append(request.url.path)
        return "ada"

    async with open_api(sqlite_url(tmp_path), tmp_path, authenticate=counting) as api:
        for path in ("/healthz", "/", "/static/app.js", "/api/threads"):
            assert (await api.client.get(path)).status_code == 200
        assert calls == ["/api/threads"]
