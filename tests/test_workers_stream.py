"""Two real server processes on one PostgreSQL database: any worker serves any thread's stream.

A client follows a thread on worker A while worker B executes its runs (the messages are posted to
B, whose runner drives them). Events reach A by PostgreSQL notification: A reads the log on a
timer only once a minute, far beyond these tests' deadlines.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from dirty_equals import IsStr
from inline_snapshot import snapshot

from .conftest import new_database
from .live_server import LiveServer, SseEvent, read_events
from .test_api import finished, new_thread, send

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

Workers = tuple[LiveServer, LiveServer]


@pytest.fixture
async def workers(tmp_path: Path) -> AsyncIterator[Workers]:
    async with new_database("postgresql", tmp_path) as database_url:
        started: list[LiveServer] = []
        try:
            for name in ("a", "b"):
                directory = tmp_path / name
                directory.mkdir()
                server = LiveServer(database_url, directory)
                server.start()
                started.append(server)
            yield started[0], started[1]
        finally:
            for server in started:
                server.stop()


def summary(events: list[SseEvent], runs: list[str]) -> list[str]:
    """`<run number> <type>` per event, repeats counted: readable, and the same on every run of the test."""
    lines: list[str] = []
    count = 0
    for index, event in enumerate(events):
        count += 1
        line = f"{runs.index(str(event.data['run_id'])) + 1} {event.type}"
        following = events[index + 1] if index + 1 < len(events) else None
        if (
            following is None
            or following.type != event.type
            or following.data["run_id"] != event.data["run_id"]
        ):
            lines.append(line if count == 1 else f"{line} x{count}")
            count = 0
    return lines


async def test_a_client_on_one_worker_follows_runs_another_executes(workers: Workers) -> None:
    a, b = workers
    token = a.token("alice")
    async with (
        httpx.AsyncClient(base_url=a.base_url, timeout=30) as on_a,
        httpx.AsyncClient(base_url=b.base_url, timeout=30) as on_b,
    ):
        thread_id = await new_thread(on_a, token)
        seen: list[SseEvent] = []

        def two_runs_finished(events: list[SseEvent]) -> bool:
            seen[:] = events
            return sum(e.type == "run_finished" for e in events) == 2

        follower = asyncio.create_task(read_events(on_a, thread_id, token, until=two_runs_finished))
        first = await send(on_b, token, thread_id, "Where is ORD-9012?")
        while not any(e.type == "run_finished" for e in seen):
            assert not follower.done(), follower
            await asyncio.sleep(0.01)
        # The follower on A is connected now: the second run's events can reach it only live.
        second = await send(on_b, token, thread_id, "What is your returns policy?")
        followed = await follower
        logged = await read_events(on_b, thread_id, token, until=finished(second))

    assert followed == logged
    ids = [e.event_id for e in followed]
    assert ids == sorted(set(ids))
    assert summary(followed, [first, second]) == snapshot(
        [
            "1 run_started",
            "1 user_message",
            "1 tool_call",
            "1 tool_result",
            "1 text_delta x7",
            "1 text_done",
            "1 run_finished",
            "2 run_started",
            "2 user_message",
            "2 tool_call",
            "2 tool_result",
            "2 text_delta x37",
            "2 text_done",
            "2 run_finished",
        ]
    )
    assert followed[-1].data == {
        "agent": "support",
        "run_id": second,
        "trace_id": IsStr(regex=r"[0-9a-f]{32}"),
        "status": "completed",
        "output": IsStr(),
    }


async def test_a_reconnect_to_one_worker_replays_what_another_wrote(workers: Workers) -> None:
    a, b = workers
    token = a.token("alice")
    async with (
        httpx.AsyncClient(base_url=a.base_url, timeout=30) as on_a,
        httpx.AsyncClient(base_url=b.base_url, timeout=30) as on_b,
    ):
        thread_id = await new_thread(on_b, token)
        first = await send(on_b, token, thread_id, "Where is ORD-5678?")
        start = await read_events(on_a, thread_id, token, until=lambda events: len(events) >= 3)
        # Disconnected from A: B finishes that run and runs another one.
        await read_events(on_b, thread_id, token, until=finished(first))
        second = await send(on_b, token, thread_id, "Hello!")
        rest = await read_events(
            on_a, thread_id, token, last_event_id=start[-1].event_id, until=finished(second)
        )
        logged = await read_events(on_b, thread_id, token, until=finished(second))

    assert start + rest == logged
    assert [e.event_id for e in rest] == sorted({e.event_id for e in rest})
    assert rest[0].event_id == start[-1].event_id + 1
    assert summary(logged, [first, second]) == snapshot(
        [
            "1 run_started",
            "1 user_message",
            "1 tool_call",
            "1 tool_result",
            "1 text_delta x9",
            "1 text_done",
            "1 run_finished",
            "2 run_started",
            "2 user_message",
            "2 text_delta x36",
            "2 text_done",
            "2 run_finished",
        ]
    )
