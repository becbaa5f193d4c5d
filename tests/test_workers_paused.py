"""A worker paused past its lease (`SIGSTOP`, then `SIGCONT`) stores nothing once it resumes.

Two real server processes on one real PostgreSQL database. The worker driving a run is paused
while the demo model thinks; the test then ends its lease (as the clock would, explicitly: the
leases are long, so no heartbeat late under load hands the run over early, and the takeover waits
for no lease to lapse), and the other worker takes the run over and finishes it. Then the paused
one resumes where it stood: its model answers, and everything it then tries to store (the answer's
events, a checkpoint) is fenced off by the lease it lost. A client connected to it all along, one
on the other worker and a replay from 0 show the same events.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import timedelta
from typing import TypeVar

import httpx
import pytest
import sqlalchemy as sa
from pydantic_ai.messages import ModelMessagesTypeAdapter

from store import Database, LoggedEvent, Run
from store.schema import RunRow, metadata

from .conftest import new_database
from .live_server import LiveServer, SseEvent, live_servers, read_events
from .step_app import shapes
from .test_api import new_thread, send

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

T = TypeVar("T")

WORKER_ENV = {
    # No lease lapses on its own within the test: only the test ends one.
    "DURABLE_CHAT_LEASE_SECONDS": "600",
    "DURABLE_CHAT_HEARTBEAT_SECONDS": "200",
    "DURABLE_CHAT_SWEEP_SECONDS": "0.5",
}
THINKING = "4"
"""Seconds the paused worker's model thinks per response: the test pauses it within them (the other
worker's model answers at once)."""
DEADLINE = 90.0


@pytest.fixture(scope="module")
async def database_url(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    async with new_database("postgresql", tmp_path_factory.mktemp("paused")) as url:
        yield url


@pytest.fixture(scope="module")
def workers(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[LiveServer]]:
    envs = [WORKER_ENV | {"DURABLE_CHAT_DEMO_DELAY_SECONDS": delay} for delay in (THINKING, "0")]
    with live_servers(database_url, tmp_path_factory.mktemp("servers"), envs) as servers:
        yield servers


@pytest.fixture(scope="module")
async def db(database_url: str, workers: list[LiveServer]) -> AsyncIterator[Database]:
    opened = await Database.connect(database_url, migrate=False)
    try:
        yield opened
    finally:
        await opened.aclose()


async def test_a_worker_paused_past_its_lease_stores_nothing_once_it_resumes(
    workers: list[LiveServer], db: Database
) -> None:
    stale, other = workers
    token = stale.token("alice")
    async with (
        httpx.AsyncClient(base_url=stale.base_url, timeout=30) as on_stale,
        httpx.AsyncClient(base_url=other.base_url, timeout=30) as on_other,
    ):
        thread_id = await new_thread(on_stale, token)
        # Two clients follow the thread from the start, one on each worker.
        following = [
            asyncio.create_task(read_events(c, thread_id, token, until=_paused, within=DEADLINE))
            for c in (on_stale, on_other)
        ]
        run_id = await send(on_stale, token, thread_id, "Please refund ORD-5678")
        await _eventually(lambda: _logged(db, run_id, "tool_result"))
        first = await db.runs.get(run_id)
        assert _pid(first) == stale.pid
        # The lookup's checkpoint is stored as the next request goes out: the model now thinks
        # about the refund. Pause the worker there, and end its lease: the other worker takes over.
        await _eventually(lambda: _sending(db, thread_id))
        stale.pause()
        try:
            assert (await db.runs.get(run_id)).status == "running"  # paused while its model thinks
            await _expire_lease(db, run_id)
            taken = await _eventually(lambda: _ended(db, run_id))
            before = await db.events.read(thread_id)
            messages = await _messages(db, thread_id)
        finally:
            stale.resume()
        assert (taken.status, taken.attempt, _pid(taken)) == ("awaiting_approval", 2, other.pid)
        # Resumed, the stale worker's model answers; it tries to go on, finds its run taken, stops.
        await _until(lambda: stale.logged("was taken over by another worker"))
        seen_on_stale, seen_on_other = await asyncio.gather(*following)
        # Anything the stale worker still had in flight has landed (or been refused) once it has
        # shut down: its shutdown waits for its runs, and it exits.
        await asyncio.to_thread(stale.stop)
        assert stale.process is not None
        assert stale.process.poll() is not None
        replay = await read_events(on_other, thread_id, token, until=_paused, within=DEADLINE)

    # Nothing stored after the takeover but the other worker's: not one event, no checkpoint.
    after = await db.events.read(thread_id)
    assert _rows(after) == _rows(before)
    assert await _messages(db, thread_id) == messages
    assert await db.runs.get(run_id) == taken
    trace = json.loads(before[0].data)["trace_id"]
    stale_events = [e.type for e in after if json.loads(e.data).get("trace_id") == trace]
    assert stale_events == ["run_started", "user_message", "tool_call", "tool_result"]
    # Every client shows the other worker's continuation, and only it.
    assert seen_on_stale == seen_on_other == replay
    assert [e.event_id for e in replay] == [e.event_id for e in after]
    assert shapes(ModelMessagesTypeAdapter.validate_json(messages)) == [
        "request: user-prompt",
        "response: tool-call(lookup_order)",
        "request: tool-return(lookup_order)",
        "response: tool-call(issue_refund)",
    ]
    # The lookup's result, shown, was stored with it: the other worker sent it to the model as it
    # was, with no lookup again.
    assert [e.type for e in replay].count("tool_result") == 1
    assert [e.data["tool_name"] for e in replay if e.type == "tool_call"] == ["lookup_order", "issue_refund"]


# -- helpers ----------------------------------------------------------------------------------------


def _paused(events: list[SseEvent]) -> bool:
    return any(e.type == "run_finished" and e.data["status"] == "awaiting_approval" for e in events)


async def _eventually(attempt: Callable[[], Awaitable[T | None]]) -> T:
    """The first truthy result of `attempt`, tried again and again (bounded)."""
    async with asyncio.timeout(DEADLINE):
        while True:
            result = await attempt()
            if result:
                return result
            await asyncio.sleep(0.05)


async def _until(condition: Callable[[], bool]) -> None:
    """Wait until `condition()` holds (bounded)."""
    async with asyncio.timeout(DEADLINE):
        while True:
            if condition():
                return
            await asyncio.sleep(0.05)


async def _expire_lease(db: Database, run_id: str) -> None:
    """End the run's lease, as its lapse would."""
    runs = metadata.tables[RunRow.__tablename__]
    async with db.engine.begin() as connection:
        await connection.execute(
            runs.update()
            .where(runs.c.run_id == run_id)
            .values(lease_expires_at=sa.func.statement_timestamp() - timedelta(seconds=1))
        )


async def _logged(db: Database, run_id: str, event_type: str) -> bool:
    run = await db.runs.get(run_id)
    return any(e.run_id == run_id and e.type == event_type for e in await db.events.read(run.thread_id))


async def _ended(db: Database, run_id: str) -> Run | None:
    run = await db.runs.get(run_id)
    return None if run.status in {"queued", "running"} else run


async def _sending(db: Database, thread_id: str) -> bool:
    """Whether the thread's stored conversation holds a tool's result (the tool step's checkpoint)."""
    conversation = await db.conversations.load(thread_id)
    return conversation is not None and any(
        part.part_kind == "tool-return" for message in conversation.messages for part in message.parts
    )


async def _messages(db: Database, thread_id: str) -> bytes:
    conversation = await db.conversations.load(thread_id)
    assert conversation is not None
    return ModelMessagesTypeAdapter.dump_json(conversation.messages)


def _pid(run: Run) -> int:
    assert run.lease_owner is not None
    return int(run.lease_owner.split(":")[1])


def _rows(events: list[LoggedEvent]) -> list[tuple[int, str, bytes]]:
    return [(e.event_id, e.type, e.data) for e in events]
