"""Every endpoint fuzzed in process on SQLite and PostgreSQL: no 5xx, and every 4xx has the error body.

The probes found by hand (`tests/test_api_input.py`) are the seeds. A request is made of a route
of the app (or a made-up path), path ids (the user's thread, another user's, a paused call, or
random text), query parameters, credentials and a body, each either valid or hostile: text with
NULs and lone surrogates, deep nesting, wrong types, bytes that are not JSON.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import anyio
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from web.tokens import issue_token

from .asgi import SECRET, Api, call, error_of, open_api

pytestmark = pytest.mark.anyio

USER = "fuzzer"

ROUTES = [
    ("GET", "/healthz"),
    ("GET", "/"),
    ("GET", "/static/app.js"),
    ("POST", "/api/threads"),
    ("GET", "/api/threads"),
    ("GET", "/api/threads/{thread}"),
    ("DELETE", "/api/threads/{thread}"),
    ("POST", "/api/threads/{thread}/messages"),
    ("GET", "/api/threads/{thread}/events"),
    ("POST", "/api/threads/{thread}/tool-calls/{call}/approve"),
    ("POST", "/api/threads/{thread}/tool-calls/{call}/reject"),
    ("GET", "/api/threads/{thread}/records"),
    ("GET", "/api/approvals"),
    ("GET", "/api/app"),
    ("POST", "/api/threads/{thread}/regenerate"),
    ("POST", "/api/ai-sdk/chat"),
    ("GET", "/api/ai-sdk/chat/{thread}/stream"),
    ("GET", "/api/ai-sdk/chat/{thread}"),
    ("POST", "/api/ag-ui"),
    ("GET", "/api/review/approvals"),
    ("GET", "/api/review/threads/{thread}"),
    ("POST", "/api/review/threads/{thread}/tool-calls/{call}/approve"),
    ("POST", "/api/review/threads/{thread}/tool-calls/{call}/reject"),
]

HOSTILE = ["\x00", "\ud800", "\udfff", "\ud83d", "\u2028", "\ufeff", "%00", "../", "'", '"', "\\", "\n"]
TEXT = st.lists(st.one_of(st.characters(), st.sampled_from(HOSTILE)), max_size=12).map("".join)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(TEXT, children, max_size=3),
    max_leaves=8,
)
FIELDS = [
    *("title", "content", "idempotency_key", "override_args", "reason"),
    *("id", "messages", "trigger", "messageId"),  # the AI SDK's chat body
    *("threadId", "runId", "state", "tools", "context", "forwardedProps", "resume"),  # AG-UI's RunAgentInput
]


@dataclass(frozen=True)
class Probe:
    """One request; `{thread}` and `{call}` in `path` become ids chosen by `thread` and `call`."""

    method: str
    path: str
    thread: str = "own"
    call: str = "paused"
    query: tuple[tuple[str, str], ...] = ()
    auth: str = "valid"
    last_event_id: str | None = None
    content_type: str | None = "application/json"
    body: bytes = b""


def _quote(text: str) -> str:
    # A lone surrogate goes out as the bytes UTF-8 would give it, as a careless client sends it.
    return quote(text, safe="", errors="surrogatepass")


def _cursor(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


QUERY = st.lists(
    st.tuples(
        st.sampled_from(["limit", "cursor", "after", "status", "x"]),
        st.one_of(
            TEXT,
            st.integers(-5, 200).map(str),
            st.just("pending"),
            JSON.map(_cursor),
            st.tuples(st.datetimes(timezones=st.timezones()), TEXT).map(
                lambda v: _cursor([v[0].isoformat(), v[1]])
            ),
        ),
    ),
    max_size=3,
).map(tuple)
BODY = st.one_of(
    st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=3).map(lambda value: json.dumps(value).encode()),
    st.binary(max_size=48),
    JSON.map(lambda value: json.dumps(value).encode()),
    st.integers(1, 3000).map(lambda depth: b"[" * depth + b"]" * depth),
)
PROBES = st.builds(
    Probe,
    method=st.sampled_from(["GET", "POST", "DELETE", "PUT"]),
    path=st.one_of(
        st.sampled_from([path for _, path in ROUTES]),
        st.lists(TEXT.map(_quote), max_size=4).map(lambda parts: "/api/" + "/".join(parts)),
    ),
    thread=st.sampled_from(["own", "idle", "other", "missing", "random"]),
    call=st.sampled_from(["paused", "missing", "random"]),
    query=QUERY,
    auth=st.just("valid")
    | st.sampled_from(
        ["none", "twice", "non-ascii", "garbage", "expired", "other", "reviewer", "forged-reviewer"]
    ),
    last_event_id=st.none() | TEXT | st.integers(-1, 10**20).map(str),
    content_type=st.just("application/json")
    | st.sampled_from([None, "text/plain", "application/x-www-form-urlencoded"]),
    body=BODY,
)
# Routes called as they are meant to be, so that the fuzz reaches past the router on each.
ROUTED = st.sampled_from(ROUTES).flatmap(lambda route: PROBES.map(lambda p: _on(p, *route)))


def _on(probe: Probe, method: str, path: str) -> Probe:
    return Probe(
        method,
        path,
        probe.thread,
        probe.call,
        probe.query,
        probe.auth,
        probe.last_event_id,
        probe.content_type,
        probe.body,
    )


@dataclass
class World:
    """The ids a probe may name: the user's threads (one with a call paused for approval), another user's."""

    api: Api
    thread_id: str
    call_id: str
    idle_thread_id: str
    other_thread_id: str


@pytest.fixture
async def world(database_url: str, tmp_path: Path) -> AsyncIterator[World]:
    async with open_api(database_url, tmp_path) as api:
        thread_id = (await api.client.post("/api/threads", json={}, headers=api.auth(USER))).json()[
            "thread_id"
        ]
        other = (await api.client.post("/api/threads", json={}, headers=api.auth("someone-else"))).json()
        idle = (await api.client.post("/api/threads", json={}, headers=api.auth(USER))).json()
        posted = await api.client.post(
            f"/api/threads/{thread_id}/messages",
            json={"content": "Please refund ORD-5678"},
            headers=api.auth(USER),
        )
        assert posted.status_code == 202
        pending: list[dict[str, str]] = []
        for _ in range(600):  # a bounded poll: the demo run pauses in milliseconds
            pending = (await api.client.get("/api/approvals", headers=api.auth(USER))).json()["approvals"]
            if pending:
                break
            await anyio.sleep(0.05)
        assert pending, "the refund never paused for approval"
        yield World(api, thread_id, pending[0]["tool_call_id"], idle["thread_id"], other["thread_id"])


def _credentials(auth: str, api: Api) -> list[tuple[bytes, bytes]]:
    valid = f"Bearer {api.token(USER)}".encode()
    match auth:
        case "valid":
            return [(b"authorization", valid)]
        case "twice":
            return [(b"authorization", valid), (b"authorization", valid)]
        case "non-ascii":
            return [(b"authorization", valid[:-1] + b"\xff")]
        case "garbage":
            return [(b"authorization", b"Bearer v1.\x00.1.\xe9")]
        case "expired":
            return [(b"authorization", f"Bearer {issue_token(SECRET, USER, ttl_seconds=-60)}".encode())]
        case "other":
            return [(b"authorization", f"Bearer {api.token('someone-else')}".encode())]
        case "reviewer":
            return [(b"authorization", f"Bearer {issue_token(SECRET, 'sam', roles=('support',))}".encode())]
        case "forged-reviewer":
            return [(b"authorization", f"Bearer {issue_token('forged', 'sam', roles=('support',))}".encode())]
        case _:
            return []


async def _send(world: World, probe: Probe) -> None:
    ids = {
        "own": world.thread_id,
        "idle": world.idle_thread_id,
        "other": world.other_thread_id,
        "missing": "no-such-thread",
        "random": _quote(probe.query[0][1] if probe.query else "x\x00"),
    }
    calls = {
        "paused": world.call_id,
        "missing": "no-such-call",
        "random": _quote("call\ud800"),
    }
    path = probe.path.replace("{thread}", ids[probe.thread]).replace("{call}", calls[probe.call])
    query = "&".join(f"{quote(k)}={_quote(v)}" for k, v in probe.query)
    headers = _credentials(probe.auth, world.api)
    if probe.content_type is not None:
        headers.append((b"content-type", probe.content_type.encode()))
    if probe.last_event_id is not None:
        headers.append((b"last-event-id", probe.last_event_id.encode("utf-8", "surrogatepass")))
    answer = await call(
        world.api.app, probe.method, f"{path}?{query}" if query else path, headers=headers, body=[probe.body]
    )
    event(f"{answer.status}")  # the spread of answers, in --hypothesis-show-statistics
    assert answer.status < 500, (probe, answer.status, answer.body[:300])
    if answer.status >= 400:
        error_of(answer.status, answer.body)
    elif answer.headers.get("content-type", "").startswith("application/json"):
        json.loads(answer.body)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@example(Probe("GET", "/api/threads", auth="non-ascii"))
@example(Probe("GET", "/api/threads", query=(("cursor", base64.urlsafe_b64encode(b"[" * 5000).decode()),)))
@example(Probe("GET", "/api/threads", query=(("cursor", _cursor(["2024-01-01T00:00:00+00:00", "a\x00b"])),)))
@example(
    Probe("GET", "/api/threads", query=(("cursor", _cursor(["2024-01-01T00:00:00+00:00", "a\ud800b"])),))
)
@example(Probe("POST", "/api/threads", body=b'{"title": "a\\u0000b"}'))
@example(Probe("POST", "/api/threads/{thread}/messages", body=b'{"content": "hi\\u0000"}'))
@example(
    Probe("POST", "/api/threads/{thread}/messages", body=b'{"content": "hi", "idempotency_key": "\\u0000"}')
)
@example(
    Probe(
        "POST", "/api/threads/{thread}/tool-calls/{call}/approve", body=b'{"override_args": {"\\u0000": 1}}'
    )
)
@example(Probe("POST", "/api/threads/{thread}/tool-calls/{call}/reject", body=b'{"reason": "\\ud800"}'))
@example(Probe("GET", "/api/threads", auth="twice"))
@example(Probe("GET", "/api/threads/{thread}/events", auth="twice"))
@example(Probe("GET", "/api/threads/{thread}/events", last_event_id="\ud800"))
@example(Probe("GET", "/api/threads/{thread}/events", query=(("after", "99999999999999999999"),)))
@example(Probe("GET", "/api/threads/{thread}", thread="random", query=(("x", "\x00"),)))
@example(Probe("POST", "/api/threads", body=b"[" * 3000 + b"]" * 3000))
@example(
    Probe("POST", "/api/ai-sdk/chat", body=b'{"id": "c\\u0000", "messages": [], "trigger": "submit-message"}')
)
@example(Probe("POST", "/api/ag-ui", body=b'{"threadId": "\\ud800", "runId": "r", "messages": []}'))
@example(Probe("GET", "/api/ai-sdk/chat/{thread}/stream", auth="twice"))
@given(probe=st.one_of(ROUTED, PROBES))
async def test_no_request_gets_a_server_error(world: World, probe: Probe) -> None:
    await _send(world, probe)
