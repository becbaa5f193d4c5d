"""Bad input found by probing, each a clear 4xx, the same on SQLite and PostgreSQL (in process)."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from web.text import unstorable_in

from .asgi import Api, call, error_of, open_api

pytestmark = pytest.mark.anyio

USER = "prober"


@pytest.fixture
async def api(database_url: str, tmp_path: Path) -> AsyncIterator[Api]:
    async with open_api(database_url, tmp_path) as opened:
        yield opened


def cursor_of(value: object) -> str:
    """A cursor as the API makes them: base64url of JSON, unpadded."""
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def raw_json(text: str) -> tuple[bytes, bytes]:
    """A JSON body sent as written (escapes such as `\\u0000` included) and its content type."""
    return text.encode(), b"application/json"


async def test_each_probe_is_a_clear_4xx_on_either_database(api: Api) -> None:
    thread_id = (await api.client.post("/api/threads", json={}, headers=api.auth(USER))).json()["thread_id"]
    token = api.token(USER).encode()
    bearer = [(b"authorization", b"Bearer " + token)]
    when = "2024-01-01T00:00:00+00:00"
    cases: list[tuple[str, str, list[tuple[bytes, bytes]], bytes, tuple[int, str]]] = [
        # hmac.compare_digest raised TypeError on a non-ASCII byte, before any check.
        (
            "GET",
            "/api/threads",
            [(b"authorization", b"Bearer " + token[:-1] + b"\xff")],
            b"",
            (401, "invalid_token"),
        ),
        ("GET", "/api/threads", [(b"authorization", b"Bearer v1.\xe9.1.x")], b"", (401, "invalid_token")),
        # The cursor decoder recursed 5,000 levels deep.
        (
            "GET",
            "/api/threads?cursor=" + base64.urlsafe_b64encode(b"[" * 5000).decode(),
            bearer,
            b"",
            (422, "validation_error"),
        ),
        # PostgreSQL refused a NUL or a lone surrogate with a 500; SQLite stored the NUL.
        ("GET", "/api/threads?cursor=" + cursor_of([when, "a\x00b"]), bearer, b"", (422, "validation_error")),
        (
            "GET",
            "/api/threads?cursor=" + cursor_of([when, "a\ud800b"]),
            bearer,
            b"",
            (422, "validation_error"),
        ),
        ("POST", "/api/threads", bearer, b'{"title": "a\\u0000b"}', (422, "validation_error")),
        ("POST", "/api/threads", bearer, b'{"title": "a\\ud800b"}', (422, "validation_error")),
        ("POST", "/api/threads", bearer, b'{"title": "a\\udc00"}', (422, "validation_error")),
        (
            "POST",
            f"/api/threads/{thread_id}/messages",
            bearer,
            b'{"content": "hi\\u0000"}',
            (422, "validation_error"),
        ),
        (
            "POST",
            f"/api/threads/{thread_id}/messages",
            bearer,
            b'{"content": "hi", "idempotency_key": "k\\u0000"}',
            (422, "validation_error"),
        ),
        (
            "POST",
            f"/api/threads/{thread_id}/tool-calls/call-1/approve",
            bearer,
            b'{"override_args": {"order_id": "ORD-5678", "a\\u0000": 1}}',
            (422, "validation_error"),
        ),
        (
            "POST",
            f"/api/threads/{thread_id}/tool-calls/call-1/reject",
            bearer,
            b'{"reason": "\\ud83d"}',
            (422, "validation_error"),
        ),
        # `json.loads` refuses an integer of more than 4,300 digits with a bare ValueError (a 500).
        (
            "POST",
            "/api/threads",
            bearer,
            b'{"title": "t", "n": 1' + b"0" * 5000 + b"}",
            (400, "invalid_json"),
        ),
        (
            "POST",
            "/api/ai-sdk/chat",
            bearer,
            b'{"id": "c", "messages": [{"id": "m", "role": "user", "parts": []}], "n": 1'
            + b"0" * 5000
            + b"}",
            (400, "invalid_json"),
        ),
        # Two credentials: which one counts depends on who reads them.
        ("GET", "/api/threads", bearer * 2, b"", (400, "ambiguous_credentials")),
        (
            "GET",
            "/api/threads",
            [*bearer, (b"authorization", b"Bearer " + api.token("someone-else").encode())],
            b"",
            (400, "ambiguous_credentials"),
        ),
        (
            "POST",
            "/api/threads",
            [*bearer, (b"authorization", b"Basic eDp5")],
            b"{}",
            (400, "ambiguous_credentials"),
        ),
    ]
    for method, url, headers, body, expected in cases:
        content_type = [(b"content-type", b"application/json")] if body else []
        answer = await call(api.app, method, url, headers=[*headers, *content_type], body=[body])
        assert error_of(answer.status, answer.body) == expected, (method, url[:80], body)
    # Nothing of it was stored.
    threads = (await api.client.get("/api/threads", headers=api.auth(USER))).json()["threads"]
    assert [t["thread_id"] for t in threads] == [thread_id]
    detail = (await api.client.get(f"/api/threads/{thread_id}", headers=api.auth(USER))).json()
    assert detail["messages"] == []


async def test_text_that_is_fine_is_stored_alike(api: Api) -> None:
    # A surrogate *pair* is one character (an emoji); other control characters are stored as they are.
    created = await call(
        api.app,
        "POST",
        "/api/threads",
        headers=[
            (b"authorization", f"Bearer {api.token(USER)}".encode()),
            (b"content-type", b"application/json"),
        ],
        body=[b'{"title": "\\ud83d\\ude00 tab\\there \\u0001"}'],
    )
    assert created.status == 201
    assert json.loads(created.body)["title"] == "\U0001f600 tab\there \x01"


async def test_an_upload_cut_off_mid_body_logs_no_error(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    thread_id = (await api.client.post("/api/threads", json={}, headers=api.auth(USER))).json()["thread_id"]
    headers = [
        (b"authorization", f"Bearer {api.token(USER)}".encode()),
        (b"content-type", b"application/json"),
        (b"content-length", b"1000"),
    ]
    with caplog.at_level(logging.DEBUG):
        # The app returns normally (an exception would reach the server, which logs it as an ERROR).
        answer = await call(
            api.app,
            "POST",
            f"/api/threads/{thread_id}/messages",
            headers=headers,
            body=[b'{"content": "he'],
            hang_up=True,
        )
    assert error_of(answer.status, answer.body) == (400, "client_disconnected")
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name.startswith("web")] == [
        ("INFO", f"a client hung up before sending its whole body: POST /api/threads/{thread_id}/messages")
    ]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=12,
)


@given(value=_JSON, ascii_only=st.booleans())
def test_only_a_backslash_u_escape_can_spell_unstorable_text_in_a_utf8_json_body(
    value: object, ascii_only: bool
) -> None:
    # `read_body` walks a body's strings for a NUL or a lone surrogate only when it holds a `\u`
    # escape: any body without one that decodes (strict UTF-8, then JSON) has none.
    try:
        raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8")
    except UnicodeEncodeError:
        return  # a lone surrogate written raw is not UTF-8: refused before JSON is read
    decoded = json.loads(raw.decode("utf-8"))
    if b"\\u" not in raw:
        assert unstorable_in(decoded) is None
    else:
        assert unstorable_in(decoded) == unstorable_in(value)
