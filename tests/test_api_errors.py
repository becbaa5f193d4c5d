"""Bad input over a real server: each answered with its status and error body, nothing changed, no 5xx."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from web.tokens import issue_token

from .live_server import LiveServer, auth, live_server, sqlite_url
from .test_api import approvals_of, new_thread, pause

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    directory = tmp_path_factory.mktemp("errors")
    # A small bucket, so the rate-limit test needs few requests; the other tests stay under it.
    limits = {"DURABLE_CHAT_RATE_LIMIT_BURST": "40", "DURABLE_CHAT_RATE_LIMIT_PER_SECOND": "5"}
    with live_server(sqlite_url(directory), directory, env=limits) as started:
        yield started


def error(response: httpx.Response) -> tuple[int, str]:
    """The status and error code of an error answer, checking the body's shape on the way."""
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) - {"details"} == {"code", "message"}
    assert isinstance(body["error"]["message"], str)
    return response.status_code, body["error"]["code"]


async def snapshot_of(client: httpx.AsyncClient, token: str) -> object:
    """Everything the user can see, to check that bad requests changed nothing."""
    threads = (await client.get("/api/threads", headers=auth(token))).json()["threads"]
    details = [
        (await client.get(f"/api/threads/{t['thread_id']}", headers=auth(token))).json() for t in threads
    ]
    approvals = (await client.get("/api/approvals", headers=auth(token))).json()
    return threads, details, approvals


async def test_bad_bodies(server: LiveServer, client: httpx.AsyncClient) -> None:
    token = server.token("bad-bodies")
    thread_id = await new_thread(client, token)
    before = await snapshot_of(client, token)
    headers = {**auth(token), "Content-Type": "application/json"}
    messages = f"/api/threads/{thread_id}/messages"
    cases: list[tuple[str, bytes | str, dict[str, str], tuple[int, str]]] = [
        (messages, b'{"content": "hi"', headers, (400, "invalid_json")),
        (messages, b"\xff\xfe{}", headers, (400, "invalid_json")),
        (messages, '{"content": "caf\u00e9"}'.encode("latin-1"), headers, (400, "invalid_json")),
        (
            messages,
            b'{"content": "hi"}',
            {**auth(token), "Content-Type": "text/plain"},
            (415, "unsupported_media_type"),
        ),
        (
            messages,
            b"content=hi",
            {**auth(token), "Content-Type": "application/x-www-form-urlencoded"},
            (415, "unsupported_media_type"),
        ),
        (messages, b'{"content": 5}', headers, (422, "validation_error")),
        (messages, b'["hi"]', headers, (422, "validation_error")),
        (messages, b"{}", headers, (422, "validation_error")),
        (messages, b'{"content": "hi", "role": "system"}', headers, (422, "validation_error")),
        (messages, b'{"content": "' + b"x" * 8001 + b'"}', headers, (422, "validation_error")),
        ("/api/threads", b'{"title": ["x"]}', headers, (422, "validation_error")),
        ("/api/threads", b"null", headers, (422, "validation_error")),
        ("/api/threads", b"[" * 100_000, headers, (413, "payload_too_large")),
        ("/api/threads", b'{"title": "' + b"x" * 70_000 + b'"}', headers, (413, "payload_too_large")),
    ]
    for path, body, request_headers, expected in cases:
        response = await client.post(path, content=body, headers=request_headers)
        assert error(response) == expected, (path, body[:40])

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(100):
            yield b" " * 1024

    # No Content-Length (chunked): the limit holds while reading.
    chunked = await client.post("/api/threads", content=chunks(), headers=headers)
    assert "content-length" not in chunked.request.headers
    assert error(chunked) == (413, "payload_too_large")
    assert await snapshot_of(client, token) == before
    # A message at the limit is fine.
    accepted = await client.post(messages, json={"content": "x" * 8000}, headers=auth(token))
    assert accepted.status_code == 202


async def test_bad_tokens(server: LiveServer, client: httpx.AsyncClient) -> None:
    token = server.token("bad-tokens")
    thread_id = await new_thread(client, token)
    before = await snapshot_of(client, token)
    cases: list[tuple[dict[str, str], str]] = [
        ({}, "missing_token"),
        ({"Authorization": ""}, "missing_token"),
        ({"Authorization": f"Basic {token}"}, "invalid_token"),
        ({"Authorization": "Bearer"}, "invalid_token"),
        ({"Authorization": "Bearer not-a-token"}, "invalid_token"),
        (auth(issue_token("another-secret", "bad-tokens")), "invalid_token"),
        (auth(token[:-2] + ("AA" if not token.endswith("AA") else "BB")), "invalid_token"),
        (auth(issue_token("e2e-test-secret", "bad-tokens", ttl_seconds=-60)), "token_expired"),
    ]
    endpoints = [
        ("GET", "/api/threads"),
        ("POST", "/api/threads"),
        ("GET", f"/api/threads/{thread_id}"),
        ("DELETE", f"/api/threads/{thread_id}"),
        ("POST", f"/api/threads/{thread_id}/messages"),
        ("GET", f"/api/threads/{thread_id}/events"),
        ("POST", f"/api/threads/{thread_id}/tool-calls/x/approve"),
        ("POST", f"/api/threads/{thread_id}/tool-calls/x/reject"),
        ("GET", f"/api/threads/{thread_id}/records"),
        ("GET", "/api/approvals"),
    ]
    for headers, code in cases:
        for method, path in endpoints:
            response = await client.request(method, path, json={"content": "hi"}, headers=headers)
            assert error(response) == (401, code), (headers, method, path)
            assert response.headers["www-authenticate"].startswith("Bearer")
    assert await snapshot_of(client, token) == before


async def test_unknown_ids_and_bad_queries(server: LiveServer, client: httpx.AsyncClient) -> None:
    token = server.token("bad-queries")
    thread_id = await new_thread(client, token)
    before = await snapshot_of(client, token)
    cases: list[tuple[str, str, tuple[int, str]]] = [
        ("GET", "/api/threads/no-such-thread", (404, "not_found")),
        ("GET", "/api/threads/" + "x" * 500, (404, "not_found")),
        ("GET", "/api/threads/%00", (404, "not_found")),
        ("POST", f"/api/threads/{thread_id}/tool-calls/no-such-call/approve", (404, "not_found")),
        ("POST", f"/api/threads/{thread_id}/tool-calls/no-such-call/reject", (404, "not_found")),
        ("GET", "/api/threads?limit=0", (422, "validation_error")),
        ("GET", "/api/threads?limit=101", (422, "validation_error")),
        ("GET", "/api/threads?limit=ten", (422, "validation_error")),
        ("GET", "/api/threads?limit=-1", (422, "validation_error")),
        ("GET", "/api/threads?cursor=not-a-cursor", (422, "validation_error")),
        ("GET", "/api/threads?cursor=WyJ4IiwgInkiXQ", (422, "validation_error")),
        ("GET", "/api/approvals?status=approved", (422, "validation_error")),
        ("GET", f"/api/threads/{thread_id}/events?after=abc", (422, "validation_error")),
        ("GET", f"/api/threads/{thread_id}/events?after=-5", (422, "validation_error")),
        # A digit to `str.isdigit`, not to `int`.
        ("GET", f"/api/threads/{thread_id}/events?after=%C2%B2", (422, "validation_error")),
        ("PUT", "/api/threads", (405, "method_not_allowed")),
        ("GET", "/api/nothing-here", (404, "not_found")),
    ]
    for method, path, expected in cases:
        response = await client.request(method, path, headers=auth(token))
        assert error(response) == expected, (method, path)
    bad_header = await client.get(
        f"/api/threads/{thread_id}/events", headers={**auth(token), "Last-Event-ID": "seven"}
    )
    assert error(bad_header) == (422, "validation_error")
    assert await snapshot_of(client, token) == before


async def test_edited_arguments_of_the_wrong_type(server: LiveServer, client: httpx.AsyncClient) -> None:
    token = server.token("bad-arguments")
    thread_id = await new_thread(client, token)
    [call_id] = approvals_of(await pause(client, token, thread_id, "Please refund ORD-5678"))
    before = await snapshot_of(client, token)
    approve = f"/api/threads/{thread_id}/tool-calls/{call_id}/approve"
    wrong_shape = await client.post(approve, json={"override_args": "refund it all"}, headers=auth(token))
    assert error(wrong_shape) == (422, "validation_error")
    wrong_type = await client.post(
        approve,
        json={"override_args": {"order_id": "ORD-5678", "amount": "lots", "reason": "x"}},
        headers=auth(token),
    )
    assert error(wrong_type) == (422, "invalid_arguments")
    assert [d["loc"] for d in wrong_type.json()["error"]["details"]] == ["amount"]
    missing = await client.post(
        approve, json={"override_args": {"order_id": "ORD-5678"}}, headers=auth(token)
    )
    assert error(missing) == (422, "invalid_arguments")
    reject_extra = await client.post(
        f"/api/threads/{thread_id}/tool-calls/{call_id}/reject", json={"reason": 5}, headers=auth(token)
    )
    assert error(reject_extra) == (422, "validation_error")
    assert await snapshot_of(client, token) == before


async def test_too_many_writes_are_rate_limited(server: LiveServer, client: httpx.AsyncClient) -> None:
    token = server.token("hasty")
    # Malformed bodies cost the server nothing but still count against the bucket.
    responses = await asyncio.gather(
        *(
            client.post(
                "/api/threads", content=b"{", headers={**auth(token), "Content-Type": "application/json"}
            )
            for _ in range(80)
        )
    )
    limited = [r for r in responses if r.status_code == 429]
    assert limited
    assert error(limited[0]) == (429, "rate_limited")
    assert int(limited[0].headers["retry-after"]) >= 1
    assert {r.status_code for r in responses} == {400, 429}
    # Reads are not limited, and other users have their own bucket.
    assert (await client.get("/api/threads", headers=auth(token))).status_code == 200
    assert (
        await client.post("/api/threads", json={}, headers=auth(server.token("patient")))
    ).status_code == 201


_SEGMENT = st.one_of(
    st.sampled_from(
        ["api", "threads", "messages", "tool-calls", "approve", "reject", "records", "approvals", ""]
    ),
    st.text(max_size=12),
)
_BODY = st.one_of(
    st.binary(max_size=64),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
        ),
        max_leaves=10,
    ).map(lambda value: json.dumps(value).encode()),
)


def test_random_requests_never_get_a_server_error(server: LiveServer) -> None:
    token = server.token("fuzzer")
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        thread_id = client.post("/api/threads", json={}, headers=auth(token)).json()["thread_id"]

        @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
        @example(  # found in CI: a path made of empty segments
            method="GET",
            segments=["", "", "", "api"],
            under_thread=False,
            body=b"",
            content_type="application/json",
            authorized=False,
        )
        @given(
            method=st.sampled_from(["GET", "POST", "DELETE", "PUT", "PATCH"]),
            segments=st.lists(_SEGMENT, max_size=6),
            under_thread=st.booleans(),
            body=_BODY,
            content_type=st.sampled_from(
                ["application/json", "text/plain", "", "application/json; charset=utf-8"]
            ),
            authorized=st.booleans(),
        )
        def check(
            method: str,
            segments: list[str],
            under_thread: bool,
            body: bytes,
            content_type: str,
            authorized: bool,
        ) -> None:
            path = "/".join(quote(segment, safe="") for segment in segments)
            prefix = f"/api/threads/{thread_id}/" if under_thread else "/"
            if path.endswith("events") or (under_thread and method == "GET" and path.endswith("event")):
                path += "x"  # a valid events path would stream forever
            headers = auth(token) if authorized else {}
            if content_type:
                headers["Content-Type"] = content_type
            # An absolute URL: httpx refuses a relative one whose path starts with "//".
            url = str(client.base_url).rstrip("/") + prefix + path
            response = client.request(method, url, content=body, headers=headers)
            assert response.status_code < 500, (method, prefix + path, body, response.text)
            if response.status_code >= 400:
                error(response)

        check()
