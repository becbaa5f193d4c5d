"""The JSON API end to end, over a real server: flows through approvals, pagination, isolation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest
from dirty_equals import IsDatetime

from .live_server import LiveServer, SseEvent, auth, read_events

pytestmark = pytest.mark.anyio


async def new_thread(client: httpx.AsyncClient, token: str, title: str = "test") -> str:
    response = await client.post("/api/threads", json={"title": title}, headers=auth(token))
    assert response.status_code == 201, response.text
    thread_id: str = response.json()["thread_id"]
    return thread_id


async def send(client: httpx.AsyncClient, token: str, thread_id: str, content: str) -> str:
    response = await client.post(
        f"/api/threads/{thread_id}/messages", json={"content": content}, headers=auth(token)
    )
    assert response.status_code == 202, response.text
    assert response.json()["thread_id"] == thread_id
    run_id: str = response.json()["run_id"]
    return run_id


def finished(run_id: str) -> Callable[[list[SseEvent]], bool]:
    """Stop reading once `run_id` finished."""
    return lambda events: any(e.type == "run_finished" and e.data["run_id"] == run_id for e in events)


async def pause(client: httpx.AsyncClient, token: str, thread_id: str, content: str) -> list[SseEvent]:
    """Send `content` and follow the thread until its run paused for approval."""
    run_id = await send(client, token, thread_id, content)
    events = await read_events(client, thread_id, token, until=finished(run_id))
    assert events[-1].data["status"] == "awaiting_approval"
    return events


def approvals_of(events: list[SseEvent]) -> list[str]:
    required = [e for e in events if e.type == "approval_required"][-1]
    calls = required.data["approvals"]
    assert isinstance(calls, list)
    return [str(call["tool_call_id"]) for call in calls]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]


async def test_a_refund_is_approved_then_made(server: LiveServer, client: httpx.AsyncClient) -> None:
    token = server.token("alice")
    thread_id = await new_thread(client, token)
    paused = await pause(client, token, thread_id, "Please refund ORD-5678")
    [call_id] = approvals_of(paused)
    detail = (await client.get(f"/api/threads/{thread_id}", headers=auth(token))).json()
    assert detail["status"] == "awaiting_approval"
    assert [a["tool_call_id"] for a in detail["pending_approvals"]] == [call_id]
    assert detail["last_event_id"] == paused[-1].event_id
    pending = (await client.get("/api/approvals?status=pending", headers=auth(token))).json()
    assert [(a["tool_call_id"], a["tool_name"]) for a in pending["approvals"]] == [(call_id, "issue_refund")]

    response = await client.post(
        f"/api/threads/{thread_id}/tool-calls/{call_id}/approve", headers=auth(token)
    )
    assert response.status_code == 200
    answer = response.json()
    assert answer["tool_call_id"] == call_id
    assert answer["decision"] == "approved"
    resume_id = answer["run_id"]
    assert isinstance(resume_id, str)

    resumed = await read_events(
        client, thread_id, token, last_event_id=paused[-1].event_id, until=finished(resume_id)
    )
    # Increasing, all after the paused run's; a run's ids are consecutive, gaps lie between runs.
    ids = [e.event_id for e in resumed]
    assert ids == sorted(set(ids))
    assert ids[0] > paused[-1].event_id
    assert resumed[0].type == "approval_decided"
    [result] = [e for e in resumed if e.type == "tool_result"]
    assert result.data["outcome"] == "success"
    assert "99.98" in str(result.data["content"])
    assert resumed[-1].data["status"] == "completed"
    detail = (await client.get(f"/api/threads/{thread_id}", headers=auth(token))).json()
    assert (detail["status"], detail["pending_approvals"]) == ("idle", [])
    assert detail["last_event_id"] == resumed[-1].event_id
    kinds = [m["kind"] for m in detail["messages"]]
    assert kinds[0] == "request"
    assert kinds[-1] == "response"
    assert (await client.get("/api/approvals?status=pending", headers=auth(token))).json() == {
        "approvals": []
    }


async def test_two_parallel_cancels_one_approved_one_rejected(
    server: LiveServer, client: httpx.AsyncClient
) -> None:
    token = server.token("alice")
    thread_id = await new_thread(client, token)
    paused = await pause(client, token, thread_id, "Cancel ORD-9012 and ORD-3456")
    cancel_9012, cancel_3456 = approvals_of(paused)
    base = f"/api/threads/{thread_id}/tool-calls"
    rejected = await client.post(
        f"{base}/{cancel_3456}/reject", json={"reason": "customer changed their mind"}, headers=auth(token)
    )
    assert rejected.json() == {
        "tool_call_id": cancel_3456,
        "decision": "rejected",
        "run_id": None,
        "decided_at": IsDatetime(iso_string=True),
    }
    # The thread still waits for the other decision: no new message meanwhile.
    blocked = await client.post(
        f"/api/threads/{thread_id}/messages", json={"content": "hi"}, headers=auth(token)
    )
    assert (blocked.status_code, blocked.json()["error"]["code"]) == (409, "approval_pending")
    approved = await client.post(f"{base}/{cancel_9012}/approve", headers=auth(token))
    resume_id = approved.json()["run_id"]
    assert isinstance(resume_id, str)
    # Deciding again the same way is harmless; the opposite decision is refused.
    again = await client.post(f"{base}/{cancel_3456}/reject", json={"reason": "x"}, headers=auth(token))
    assert again.json() == rejected.json()
    opposite = await client.post(f"{base}/{cancel_9012}/reject", headers=auth(token))
    assert (opposite.status_code, opposite.json()["error"]["code"]) == (409, "already_decided")

    resumed = await read_events(
        client, thread_id, token, after=paused[-1].event_id, until=finished(resume_id)
    )
    outcomes = {e.data["tool_call_id"]: e.data["outcome"] for e in resumed if e.type == "tool_result"}
    assert outcomes == {cancel_9012: "success", cancel_3456: "denied"}
    assert "customer changed their mind" in str(resumed[-1].data["output"])


async def test_twenty_identical_approvals_at_once_resume_once_and_refund_once(
    server: LiveServer, client: httpx.AsyncClient
) -> None:
    token = server.token("alice")
    thread_id = await new_thread(client, token)
    paused = await pause(client, token, thread_id, "Please refund ORD-3456")
    [call_id] = approvals_of(paused)
    responses = await asyncio.gather(
        *(
            client.post(f"/api/threads/{thread_id}/tool-calls/{call_id}/approve", headers=auth(token))
            for _ in range(20)
        )
    )
    assert {r.status_code for r in responses} == {200}
    run_ids = {r.json()["run_id"] for r in responses}
    assert len(run_ids) == 1
    [resume_id] = run_ids
    assert isinstance(resume_id, str)
    everything = await read_events(client, thread_id, token, until=finished(resume_id))
    results = [e for e in everything if e.type == "tool_result" and e.data["tool_name"] == "issue_refund"]
    assert len(results) == 1
    assert sum(e.type == "approval_decided" for e in everything) == 1
    assert sum(e.type == "run_started" for e in everything) == 2
    assert "Refunded $24.95 for ORD-3456" in str(results[0].data["content"])
    assert "24.95" in str(everything[-1].data["output"])


async def test_idempotent_messages_and_one_run_at_a_time(
    server: LiveServer, client: httpx.AsyncClient
) -> None:
    token = server.token("alice")
    thread_id = await new_thread(client, token)
    body = {"content": "Where is ORD-9012?", "idempotency_key": "key-1"}
    first = await client.post(f"/api/threads/{thread_id}/messages", json=body, headers=auth(token))
    second = await client.post(f"/api/threads/{thread_id}/messages", json=body, headers=auth(token))
    assert (first.status_code, second.status_code) == (202, 202)
    assert first.json() == second.json()
    run_id = first.json()["run_id"]
    await read_events(client, thread_id, token, until=finished(run_id))
    third = await client.post(f"/api/threads/{thread_id}/messages", json=body, headers=auth(token))
    assert third.json()["run_id"] == run_id
    events = await read_events(client, thread_id, token, until=finished(run_id))
    assert sum(e.type == "run_started" for e in events) == 1


async def test_threads_page_newest_first_with_a_cursor(server: LiveServer, client: httpx.AsyncClient) -> None:
    token = server.token("carol")
    created = [await new_thread(client, token, title=f"t{i}") for i in range(5)]
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params = {"limit": "2"} if cursor is None else {"limit": "2", "cursor": cursor}
        page = (await client.get("/api/threads", params=params, headers=auth(token))).json()
        pages += 1
        seen += [t["thread_id"] for t in page["threads"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert (seen, pages) == (created[::-1], 3)
    assert set(page["threads"][0]) == {"thread_id", "title", "status", "created_at", "updated_at"}
    deleted = await client.delete(f"/api/threads/{created[0]}", headers=auth(token))
    assert (deleted.status_code, deleted.content) == (204, b"")
    gone = await client.get(f"/api/threads/{created[0]}", headers=auth(token))
    assert gone.status_code == 404
    listed = (await client.get("/api/threads", headers=auth(token))).json()
    assert [t["thread_id"] for t in listed["threads"]] == created[:0:-1]


async def test_records_of_a_thread(server: LiveServer, client: httpx.AsyncClient) -> None:
    token = server.token("alice")
    thread_id = await new_thread(client, token)
    run_id = await send(client, token, thread_id, "Here is my feedback: great service")
    await read_events(client, thread_id, token, until=finished(run_id))
    records = (await client.get(f"/api/threads/{thread_id}/records", headers=auth(token))).json()["records"]
    assert len(records) == 1
    assert set(records[0]) >= {"tool_call_id", "run_id", "kind", "data"}


async def test_another_users_thread_is_a_404_on_every_endpoint(
    server: LiveServer, client: httpx.AsyncClient
) -> None:
    alice, mallory = server.token("alice"), server.token("mallory")
    thread_id = await new_thread(client, alice)
    paused = await pause(client, alice, thread_id, "Please refund ORD-5678")
    [call_id] = approvals_of(paused)
    thread = f"/api/threads/{thread_id}"
    calls: list[tuple[str, str, dict[str, object] | None]] = [
        ("GET", thread, None),
        ("DELETE", thread, None),
        ("POST", f"{thread}/messages", {"content": "hello"}),
        ("GET", f"{thread}/events", None),
        ("POST", f"{thread}/tool-calls/{call_id}/approve", {}),
        ("POST", f"{thread}/tool-calls/{call_id}/reject", {"reason": "no"}),
        ("GET", f"{thread}/records", None),
    ]
    for method, path, body in calls:
        response = await client.request(method, path, json=body, headers=auth(mallory))
        assert response.status_code == 404, (method, path)
        assert response.json() == {"error": {"code": "not_found", "message": f"no thread {thread_id!r}"}}
        missing = await client.request(
            method, path.replace(thread_id, "no-such-thread"), json=body, headers=auth(alice)
        )
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "not_found"
    assert (await client.get("/api/threads", headers=auth(mallory))).json() == {
        "threads": [],
        "next_cursor": None,
    }
    assert (await client.get("/api/approvals?status=pending", headers=auth(mallory))).json() == {
        "approvals": []
    }
    # Nothing changed for alice.
    detail = (await client.get(thread, headers=auth(alice))).json()
    assert (detail["status"], [a["tool_call_id"] for a in detail["pending_approvals"]]) == (
        "awaiting_approval",
        [call_id],
    )
    assert detail["last_event_id"] == paused[-1].event_id


async def test_the_app_served_and_the_context_it_gives_reviewers(
    server: LiveServer, client: httpx.AsyncClient
) -> None:
    token = server.token("rita")
    info = await client.get("/api/app", headers=auth(token))
    assert info.json() == {
        "name": "Shop support",
        "starter_prompts": [
            "Where is ORD-5678?",
            "Please refund ORD-5678",
            "Cancel ORD-9012 and ORD-3456",
            "What is your warranty?",
            "Some feedback: the delivery was fast and the support was great!",
        ],
    }
    assert (await client.get("/api/app")).status_code == 401

    thread_id = await new_thread(client, token)
    await pause(client, token, thread_id, "Please refund ORD-3456")
    [pending] = (await client.get(f"/api/threads/{thread_id}", headers=auth(token))).json()[
        "pending_approvals"
    ]
    [listed] = (await client.get("/api/approvals?status=pending", headers=auth(token))).json()["approvals"]

    # Other tests of the module may have refunded this order already: the figures are today's.
    context = pending["context"]
    assert list(context) == ["Order", "Status", "Total", "Already refunded", "Refundable"]
    assert (context["Order"], context["Status"], context["Total"]) == (
        "ORD-3456: Cable Kit x5",
        "delivered",
        "$24.95",
    )
    refunded, refundable = (float(context[key].lstrip("$")) for key in ("Already refunded", "Refundable"))
    assert round(refunded + refundable, 2) == 24.95
    assert listed == pending
    assert "outcome" not in pending  # only a call whose outcome became unknown says so


async def test_a_bad_message_to_a_thread_not_the_users_is_a_404_and_stores_nothing(
    server: LiveServer, client: httpx.AsyncClient
) -> None:
    # Queueing finds only the user's own thread, with no read of it first: a bad body is checked
    # before, and on that path the thread is read, so a missing thread still answers 404 first.
    alice, mallory = server.token("alice-bad-body"), server.token("mallory-bad-body")
    thread_id = await new_thread(client, alice)
    too_long = {"content": "x" * 9000}
    bodies: list[tuple[bytes, tuple[int, str]]] = [
        (b'{"content": "hi"', (400, "invalid_json")),
        (b'{"content": 42}', (422, "validation_error")),
        (httpx.Request("POST", "/", json=too_long).content, (422, "validation_error")),
    ]
    path = f"/api/threads/{thread_id}/messages"
    headers = {"Content-Type": "application/json"}
    for body, (status, code) in bodies:
        mine = await client.post(path, content=body, headers=auth(alice) | headers)
        assert (mine.status_code, mine.json()["error"]["code"]) == (status, code), body[:40]
        for token, where in ((mallory, path), (alice, path.replace(thread_id, "no-such-thread"))):
            theirs = await client.post(where, content=body, headers=auth(token) | headers)
            assert theirs.status_code == 404, (body[:40], where)
            assert theirs.json()["error"]["code"] == "not_found"
    # Good bodies too: another user's POST finds no thread, and leaves it as it was.
    response = await client.post(path, json={"content": "hello"}, headers=auth(mallory))
    assert response.json() == {"error": {"code": "not_found", "message": f"no thread {thread_id!r}"}}
    thread = (await client.get(f"/api/threads/{thread_id}", headers=auth(alice))).json()
    assert (thread["status"], thread["messages"]) == ("idle", [])
