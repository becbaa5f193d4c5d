"""No input makes a thread unreadable: hostile values go in through every write endpoint, and every
read endpoint answers them back without a 5xx, on SQLite and PostgreSQL.

The bodies that Python's `json` would read but no encoder writes back (`NaN`, `Infinity`, `1e400`)
are refused as `400 invalid_json`; a value stored before that (or by a tool) is still read back.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import Approval, NewEvent
from stream import ApprovalDecided, event_data
from web.services import Services

from .asgi import Api, call, error_of, open_api
from .waiting import eventually

pytestmark = pytest.mark.anyio

USER = "reader"

NOT_FINITE = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" * 400 + ".0"]
HOSTILE_TEXT = ["\x00", "\ud800", "\udfff", "\u2028", "\ufeff", "\\", '"', "</script>", "\u202e", "💥" * 3]
TEXT = st.lists(st.one_of(st.characters(), st.sampled_from(HOSTILE_TEXT)), max_size=10).map("".join)
# JSON text, as a client writes it: `json.dumps` with its defaults spells NaN and infinities too.
VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(TEXT, children, max_size=3),
    max_leaves=6,
)


def _raw(value: object) -> str:
    return (
        json.dumps(value, ensure_ascii=False)
        .encode("utf-8", "surrogatepass")
        .decode("utf-8", "surrogatepass")
    )


@dataclass
class World:
    api: Api
    thread_id: str
    call_id: str


async def _paused(api: Api, content: str) -> tuple[str, str]:
    thread_id = (await api.client.post("/api/threads", json={}, headers=api.auth(USER))).json()["thread_id"]
    posted = await api.client.post(
        f"/api/threads/{thread_id}/messages", json={"content": content}, headers=api.auth(USER)
    )
    assert posted.status_code == 202, posted.text

    async def paused() -> str | None:
        thread = (await api.client.get(f"/api/threads/{thread_id}", headers=api.auth(USER))).json()
        return thread["pending_approvals"][0]["tool_call_id"] if thread["pending_approvals"] else None

    return thread_id, await eventually(paused)


@pytest.fixture
async def world(database_url: str, tmp_path: Path) -> AsyncIterator[World]:
    async with open_api(database_url, tmp_path) as api:
        thread_id, call_id = await _paused(api, "Please refund ORD-5678")
        yield World(api, thread_id, call_id)


def _writes(world: World, value: object, text: str) -> list[tuple[str, str, bytes]]:
    """Every write endpoint, given `value` where it takes JSON and `text` where it takes a string."""
    t, c = world.thread_id, world.call_id
    raw = _raw(value)
    return [
        ("POST", "/api/threads", f'{{"title": {_raw(text)}}}'.encode("utf-8", "surrogatepass")),
        ("PATCH", f"/api/threads/{t}", f'{{"title": {_raw(text)}}}'.encode("utf-8", "surrogatepass")),
        ("POST", f"/api/threads/{t}/messages", f'{{"content": {raw}}}'.encode("utf-8", "surrogatepass")),
        (
            "POST",
            f"/api/threads/{t}/tool-calls/{c}/approve",
            f'{{"override_args": {{"order_id": "ORD-5678", "amount": {raw}, "reason": {_raw(text)}}}}}'.encode(
                "utf-8", "surrogatepass"
            ),
        ),
        (
            "POST",
            f"/api/threads/{t}/tool-calls/{c}/reject",
            f'{{"reason": {raw}}}'.encode("utf-8", "surrogatepass"),
        ),
        (
            "POST",
            "/api/ai-sdk/chat",
            (
                f'{{"id": "{t}", "messages": [{{"id": "m1", "role": "user", "parts": '
                f'[{{"type": "text", "text": {_raw(text)}, "extra": {raw}}}]}}]}}'
            ).encode("utf-8", "surrogatepass"),
        ),
        (
            "POST",
            "/api/ag-ui",
            (
                f'{{"threadId": "{t}", "runId": "r1", "state": {raw}, "tools": [], "context": [], '
                f'"forwardedProps": {raw}, "messages": [{{"id": "u1", "role": "user", "content": {_raw(text)}}}]}}'
            ).encode("utf-8", "surrogatepass"),
        ),
    ]


def _reads(world: World) -> list[str]:
    t = world.thread_id
    return [
        "/api/threads",
        "/api/threads?limit=100",
        f"/api/threads/{t}",
        "/api/approvals",
        "/api/approvals?status=pending",
        f"/api/threads/{t}/records",
        f"/api/ai-sdk/chat/{t}",
        "/api/app",
    ]


def _not_json(name: str) -> object:
    raise AssertionError(f"{name} is not JSON")


async def _read_everything(world: World) -> None:
    headers = [(b"authorization", f"Bearer {world.api.token(USER)}".encode())]
    for path in _reads(world):
        answer = await call(world.api.app, "GET", path, headers=headers)
        assert answer.status == 200, (path, answer.status, answer.body[:300])
        json.loads(answer.body, parse_constant=_not_json)  # strict JSON: no NaN, no Infinity
    # The event log too, from its start (the stream is taken as far as it has gone, then left).
    events = await call(
        world.api.app, "GET", f"/api/threads/{world.thread_id}/events?after=0", headers=headers
    )
    assert events.status == 200, events.body[:300]


async def _write(world: World, method: str, path: str, body: bytes) -> None:
    headers = [
        (b"authorization", f"Bearer {world.api.token(USER)}".encode()),
        (b"content-type", b"application/json"),
    ]
    answer = await call(world.api.app, method, path, headers=headers, body=[body])
    if path.startswith(("/api/ai-sdk", "/api/ag-ui")) and answer.status == 200:
        return  # a stream, taken as far as it had gone
    assert answer.status < 500, (method, path, body[:200], answer.status, answer.body[:300])
    if answer.status >= 400:
        error_of(answer.status, answer.body)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=VALUE, text=TEXT, which=st.integers(0, 6))
async def test_anything_stored_is_read_back(world: World, value: object, text: str, which: int) -> None:
    method, path, body = _writes(world, value, text)[which]
    await _write(world, method, path, body)
    await _read_everything(world)


@pytest.mark.parametrize("number", NOT_FINITE)
async def test_non_finite_numbers_are_refused(world: World, number: str) -> None:
    for method, path, body in _writes(world, "__N__", "t"):
        if b'"__N__"' not in body:
            continue  # a title: it takes text only
        body = body.replace(b'"__N__"', number.encode())
        headers = [
            (b"authorization", f"Bearer {world.api.token(USER)}".encode()),
            (b"content-type", b"application/json"),
        ]
        answer = await call(world.api.app, method, path, headers=headers, body=[body])
        assert error_of(answer.status, answer.body) == (400, "invalid_json"), (path, answer.body[:300])
        message = json.loads(answer.body)["error"]["message"]
        assert message.startswith("the body is not valid JSON"), message
    # The call is still pending, and everything reads back.
    pending = (await world.api.client.get("/api/approvals", headers=world.api.auth(USER))).json()["approvals"]
    assert [a["tool_call_id"] for a in pending] == [world.call_id]
    await _read_everything(world)


async def test_a_non_finite_value_stored_before_is_read_back(world: World) -> None:
    """A row written before bodies were checked (or by a tool) does not make the thread a 500."""
    s: Services = world.api.app.state.services

    def decided(approval: Approval) -> NewEvent:
        event = ApprovalDecided(
            run_id=approval.run_id, tool_call_id=approval.tool_call_id, decision="approved", decided_by=USER
        )
        return NewEvent(event.run_id, event.type, event_data(event))

    # As the API stored it before: `override_args` straight from Python's `json`, NaN and all.
    await s.db.approvals.decide(
        world.thread_id,
        world.call_id,
        decision="approved",
        decided_by=USER,
        override_args={"order_id": "ORD-5678", "amount": float("nan"), "reason": "x"},
        event=decided,
    )
    await _read_everything(world)
    thread = (
        await world.api.client.get(f"/api/threads/{world.thread_id}", headers=world.api.auth(USER))
    ).json()
    (approval,) = thread["approvals"]
    assert approval["override_args"] == {"order_id": "ORD-5678", "amount": None, "reason": "x"}


@pytest.mark.parametrize("limit", ["\u0663", "\uff13", "\u00b2", "3\u200b", "0003" + "0" * 5000])
async def test_limit_takes_ascii_digits_only(world: World, limit: str) -> None:
    answer = await world.api.client.get("/api/threads", params={"limit": limit}, headers=world.api.auth(USER))
    assert error_of(answer.status_code, answer.content) == (422, "validation_error")
    assert "limit must be an integer from 1 to 100" in answer.json()["error"]["message"]
