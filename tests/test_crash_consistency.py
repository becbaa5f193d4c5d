"""After a `kill -9` and a restart, a client that stayed connected shows what a fresh replay shows.

A real server process on SQLite and on PostgreSQL. The client follows the thread live, is cut off
by the kill and reconnects with its last id, as the page and the terminal do; a second client then
replays the thread from 0. No ghost event (sent live, never stored), no result shown twice.
Leases of an hour: only the restarted server, seeing that its predecessor's process is gone, takes
the run over within the test. The demo model's thinking time holds the run where the kill lands.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from inline_snapshot import snapshot
from pydantic_ai.messages import ModelMessagesTypeAdapter

from .live_server import SseEvent, auth, live_server, read_events
from .step_app import shapes
from .test_api import approvals_of, finished, new_thread, pause, send

pytestmark = pytest.mark.anyio

ENV = {
    "DURABLE_CHAT_LEASE_SECONDS": "3600",
    "DURABLE_CHAT_HEARTBEAT_SECONDS": "60",
    "DURABLE_CHAT_DEMO_DELAY_SECONDS": "2",
}


async def test_a_refund_result_is_shown_once_after_a_crash(database_url: str, tmp_path: Path) -> None:
    # The reproduction: the refund's result streams, the kill lands 0.6 s later, while the
    # model thinks about its answer; the restarted server sends the model the stored result.
    with live_server(database_url, tmp_path, ENV) as server:
        token = server.token("alice")
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            thread_id = await new_thread(client, token)
            paused = await pause(client, token, thread_id, "Please refund ORD-3456")
            [call_id] = approvals_of(paused)
            response = await client.post(
                f"/api/threads/{thread_id}/tool-calls/{call_id}/approve", headers=auth(token)
            )
            assert response.status_code == 200, response.text
            resume_id = response.json()["run_id"]
            seen = await read_events(
                client, thread_id, token, last_event_id=paused[-1].event_id, until=_has_result
            )
        await asyncio.sleep(0.6)
        server.kill()
        server.start()
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            rest = await read_events(
                client, thread_id, token, last_event_id=seen[-1].event_id, until=finished(resume_id)
            )
            replay = await read_events(client, thread_id, token, until=finished(resume_id))
            detail = (await client.get(f"/api/threads/{thread_id}", headers=auth(token))).json()

    connected = paused + seen + rest
    assert connected == replay
    assert _ids_increase(replay)
    refunds = [e for e in replay if e.type == "tool_result" and e.data["tool_name"] == "issue_refund"]
    assert [e.data["content"] for e in refunds] == [
        {
            "order_id": "ORD-3456",
            "refunded": 24.95,
            "accepted": True,
            "message": "Refunded $24.95 for ORD-3456.",
        }
    ]
    assert _kinds(replay, resume_id) == snapshot(
        [
            "run_started resume",
            "tool_result issue_refund",
            "run_started recover",
            "text_delta",
            "text_done",
            "run_finished completed",
        ]
    )
    messages = ModelMessagesTypeAdapter.validate_python(detail["messages"])
    assert shapes(messages) == snapshot(
        [
            "request: user-prompt",
            "response: tool-call(lookup_order)",
            "request: tool-return(lookup_order)",
            "response: tool-call(issue_refund)",
            "request: tool-return(issue_refund)",
            "response: text",
        ]
    )


async def test_a_client_connected_across_a_crash_ends_with_what_a_replay_shows(
    database_url: str, tmp_path: Path
) -> None:
    with live_server(database_url, tmp_path, ENV) as server:
        token = server.token("alice")
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            thread_id = await new_thread(client, token)
            follower = asyncio.create_task(read_events(client, thread_id, token, until=_has_result))
            run_id = await send(client, token, thread_id, "Where is ORD-9012?")
            seen = await follower
        # At once: the lookup's result just reached the client, the model has not answered yet.
        server.kill()
        server.start()
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            rest = await read_events(
                client, thread_id, token, last_event_id=seen[-1].event_id, until=finished(run_id)
            )
            replay = await read_events(client, thread_id, token, until=finished(run_id))

    assert seen + rest == replay
    assert _ids_increase(replay)
    # The lookup's result reached the client, so it was stored with it: the recovery sent it to
    # the model as it was, and neither asked for the lookup nor showed it again.
    assert _kinds(replay, run_id) == snapshot(
        [
            "run_started message",
            "user_message",
            "tool_call lookup_order",
            "tool_result lookup_order",
            "run_started recover",
            "text_delta",
            "text_done",
            "run_finished completed",
        ]
    )


def _has_result(events: list[SseEvent]) -> bool:
    return bool(events) and events[-1].type == "tool_result"


def _ids_increase(events: list[SseEvent]) -> bool:
    ids = [e.event_id for e in events]
    return ids == sorted(set(ids))


def _kinds(events: list[SseEvent], run_id: str) -> list[str]:
    """The run's events as `type [tool]` lines, consecutive text deltas as one line."""
    lines: list[str] = []
    for event in events:
        if event.data["run_id"] != run_id:
            continue
        detail = event.data.get("tool_name") or event.data.get("kind") or event.data.get("status") or ""
        line = f"{event.type} {detail}".rstrip()
        if not (line == "text_delta" and lines and lines[-1] == line):
            lines.append(line)
    return lines
