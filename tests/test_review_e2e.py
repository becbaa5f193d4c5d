"""Human review over real server processes: deadlines across a SIGKILL, workers racing one
deadline on PostgreSQL, webhooks that fail and survive a kill.

Time is driven by short deadlines and conditions, never by sleeping: the deadline sweep of these
servers runs only at start (`DURABLE_CHAT_DEADLINE_POLL_SECONDS=3600`), so a deadline enforced
after a restart was enforced by that start's sweep.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from .conftest import MigratedDatabases
from .live_server import LiveServer, auth, has, read_events, sqlite_url
from .test_webhooks import Receiver, receiving
from .waiting import eventually, eventually_sync

pytestmark = pytest.mark.anyio

APP = "tests.review_app:app"
ONLY_AT_START = {"DURABLE_CHAT_DEADLINE_POLL_SECONDS": "3600"}
WEBHOOK_SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
Json = dict[str, object]


async def _paused_refund(client: httpx.AsyncClient, token: str) -> tuple[str, Json]:
    created = await client.post("/api/threads", json={}, headers=auth(token))
    thread_id: str = created.json()["thread_id"]
    sent = await client.post(
        f"/api/threads/{thread_id}/messages", json={"content": "Please refund ORD-9012"}, headers=auth(token)
    )
    assert sent.status_code == 202, sent.text

    async def paused() -> Json | None:
        detail: Json = (await client.get(f"/api/threads/{thread_id}", headers=auth(token))).json()
        return detail if detail["status"] == "awaiting_approval" else None

    detail = await eventually(paused)
    [pending] = detail["pending_approvals"]  # pyright: ignore[reportGeneralTypeIssues, reportUnknownVariableType]
    return thread_id, pending  # pyright: ignore[reportUnknownVariableType]


def _wait_past(moment: str) -> None:
    deadline = datetime.fromisoformat(moment)
    eventually_sync(lambda: datetime.now(UTC) > deadline, f"the deadline {moment} to pass")


async def _expired_once(client: httpx.AsyncClient, server: LiveServer, thread_id: str) -> None:
    """The call was rejected by `system` once, and the run resumed once and finished."""
    token = server.token("alice")
    events = await read_events(client, thread_id, token, until=has("run_finished", 2))
    decided = [e.data for e in events if e.type == "approval_decided"]
    assert [(d["decision"], d["decided_by"]) for d in decided] == [("rejected", "system")]
    assert [e.data["kind"] for e in events if e.type == "run_started"] == ["message", "resume"]
    denied = [e.data for e in events if e.type == "tool_result" and e.data["tool_name"] == "issue_refund"]
    assert [d["outcome"] for d in denied] == ["denied"]
    staff = auth(server.token("sam", roles=("support",)))
    audit = (await client.get("/api/review/approvals?status=decided", headers=staff)).json()["approvals"]
    assert [(a["thread_id"], a["decided_by"]) for a in audit] == [(thread_id, "system")]
    assert "expired" in str(audit[0]["reason"])


async def test_a_deadline_passed_while_the_server_was_killed_is_enforced_at_start(tmp_path: Path) -> None:
    server = LiveServer(sqlite_url(tmp_path), tmp_path, ONLY_AT_START, app=APP)
    server.start()
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            thread_id, pending = await _paused_refund(client, server.token("alice"))
        server.kill()
        _wait_past(str(pending["expires_at"]))
        server.start()
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            await _expired_once(client, server, thread_id)
        assert server.logged(f"tool call {pending['tool_call_id']} expired and was rejected")
    finally:
        server.stop()


@pytest.mark.postgres
async def test_three_postgresql_workers_racing_one_deadline_enforce_it_once(
    tmp_path: Path, migrated_databases: MigratedDatabases
) -> None:
    url = await migrated_databases.empty("postgresql")
    first = LiveServer(url, tmp_path, ONLY_AT_START, app=APP)
    first.start()
    try:
        async with httpx.AsyncClient(base_url=first.base_url, timeout=30) as client:
            thread_id, pending = await _paused_refund(client, first.token("alice"))
    finally:
        first.kill()
    _wait_past(str(pending["expires_at"]))
    # Three workers start side by side, each sweeping at start: one of them rejects the call.
    servers = [LiveServer(url, tmp_path, ONLY_AT_START, app=APP) for _ in range(3)]
    try:
        for server in servers:
            server.launch()
        for server in servers:
            server.wait_ready()
        async with httpx.AsyncClient(base_url=servers[0].base_url, timeout=30) as client:
            await _expired_once(client, servers[0], thread_id)
        enforced = [
            s.logged(f"tool call {pending['tool_call_id']} expired and was rejected") for s in servers
        ]
        assert sorted(enforced) == [False, False, True]
    finally:
        for server in servers:
            server.stop()


async def test_webhooks_fail_then_arrive_signed_with_one_id_across_a_kill(tmp_path: Path) -> None:
    with receiving(failures=2) as receiver:
        env = {
            **ONLY_AT_START,
            "DURABLE_CHAT_WEBHOOK_URL": receiver.url,
            "DURABLE_CHAT_WEBHOOK_SECRET": WEBHOOK_SECRET,
        }
        server = LiveServer(sqlite_url(tmp_path), tmp_path, env, app="agent.demo:staffed_shop_app")
        server.start()
        try:
            async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
                thread_id, pending = await _paused_refund(client, server.token("alice"))
            # The endpoint refused the first try; the worker dies; its successor tries again.
            eventually_sync(lambda: len(receiver.received) >= 1, "the first webhook attempt")
            server.kill()
            server.start()
            eventually_sync(lambda: len(receiver.received) >= 3, "the third attempt, answered 204")
            staff = auth(server.token("sam", roles=("support",)))
            async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
                path = f"/api/review/threads/{thread_id}/tool-calls/{pending['tool_call_id']}/approve"
                assert (await client.post(path, json={}, headers=staff)).status_code == 200
            eventually_sync(lambda: _types(receiver)[-1:] == ["approval.decided"], "the decision's webhook")
        finally:
            server.stop()
    verifier = Webhook(WEBHOOK_SECRET)
    payloads = [verifier.verify(body, headers) for headers, body in receiver.received]
    ids = [headers["webhook-id"] for headers, _ in receiver.received]
    types = _types(receiver)
    requested = [i for i, t in zip(ids, types, strict=True) if t == "approval.requested"]
    assert len(requested) >= 3  # two refusals, then the same message accepted
    assert len(set(requested)) == 1
    assert types.count("approval.decided") == 1
    assert len(set(ids)) == 2
    assert all(p["data"]["thread_id"] == thread_id for p in payloads)  # pyright: ignore[reportIndexIssue]


def _types(receiver: Receiver) -> list[str]:
    with receiver.lock:
        return [json.loads(body)["type"] for _, body in receiver.received]
