"""Several real server processes (workers) on one real PostgreSQL database: claims, kills, takeovers.

The demo model thinks `DEMO_DELAY` seconds before each response, which holds a run between two
model calls long enough to `kill -9` the worker driving it there. Leases are short, so a dead
worker's run is taken over within seconds.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TypeVar

import httpx
import pytest
import sqlalchemy as sa
from inline_snapshot import snapshot
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse, ToolCallPart, ToolReturnPart

from agent.demo import BusinessData
from store import Database, LoggedEvent, Run
from store.schema import RunRow, ToolExecutionRow, metadata

from .conftest import new_database
from .live_server import LiveServer, auth, live_servers, read_events
from .step_app import shapes
from .test_api import approvals_of, finished, new_thread, pause, send

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

T = TypeVar("T")

DEMO_DELAY = 2.0
WORKER_ENV = {
    "DURABLE_CHAT_LEASE_SECONDS": "3",
    "DURABLE_CHAT_HEARTBEAT_SECONDS": "0.5",
    "DURABLE_CHAT_SWEEP_SECONDS": "0.5",
    "DURABLE_CHAT_DEMO_DELAY_SECONDS": str(DEMO_DELAY),
}
DEADLINE = 90.0

_runs = metadata.tables[RunRow.__tablename__]
_ledger = metadata.tables[ToolExecutionRow.__tablename__]


@pytest.fixture(scope="module")
async def database_url(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    async with new_database("postgresql", tmp_path_factory.mktemp("workers")) as url:
        yield url


@pytest.fixture(scope="module")
def cluster(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[LiveServer]]:
    """Three workers on one database for the module; each test gets them all alive (see `workers`)."""
    with live_servers(database_url, tmp_path_factory.mktemp("servers"), [WORKER_ENV] * 3) as servers:
        yield servers


@pytest.fixture
def workers(cluster: list[LiveServer]) -> list[LiveServer]:
    """The three workers, those a previous test killed or stopped started again (on new ports' pids)."""
    dead = [server for server in cluster if not server.alive]
    for server in dead:
        server.launch()
    for server in dead:
        server.wait_ready()
    return cluster


@pytest.fixture(scope="module")
async def db(database_url: str, cluster: list[LiveServer]) -> AsyncIterator[Database]:
    """The test's own view of the database, to watch runs and events as the workers write them."""
    opened = await Database.connect(database_url, migrate=False)
    try:
        yield opened
    finally:
        await opened.aclose()


async def test_a_worker_killed_between_model_calls_and_during_a_resumed_refund(
    workers: list[LiveServer], db: Database
) -> None:
    first = workers[0]
    token = first.token("alice")
    async with httpx.AsyncClient(base_url=first.base_url, timeout=30) as client:
        thread_id = await new_thread(client, token)
        run_id = await send(client, token, thread_id, "Please refund ORD-5678")

    # The order was looked up, and the model thinks about the refund: kill the worker driving it.
    await _eventually(lambda: _logged(db, run_id, "tool_result", "lookup_order"))
    killed = await _kill_owner(db, run_id, workers)
    paused = await _eventually(lambda: _ended(db, run_id))
    assert paused.status == "awaiting_approval"
    assert paused.attempt == 2
    assert _owner(paused, workers) is not killed

    # Approve on a live worker; kill the worker resuming it once the refund is made.
    [call_id] = [a.tool_call_id for a in await db.approvals.list(thread_id=thread_id, status="pending")]
    survivor = next(w for w in workers if w.alive)
    async with httpx.AsyncClient(base_url=survivor.base_url, timeout=30) as client:
        response = await client.post(
            f"/api/threads/{thread_id}/tool-calls/{call_id}/approve", headers=auth(token)
        )
    assert response.status_code == 200, response.text
    resume_id = response.json()["run_id"]
    await _eventually(lambda: _logged(db, resume_id, "tool_result", "issue_refund"))
    second_killed = await _kill_owner(db, resume_id, workers)
    resumed = await _eventually(lambda: _ended(db, resume_id))
    assert (resumed.status, resumed.attempt) == ("completed", 2)
    [last] = [w for w in workers if w.alive]
    assert _owner(resumed, workers) is last
    assert {killed, second_killed, last} == set(workers)

    # One refund, whatever the kills.
    order = await BusinessData(db.engine).get_order("ORD-5678")
    assert order is not None
    assert order.refunded_cents == 9998
    assert await _ledger_rows(db, thread_id) == [("issue_refund", call_id)]

    # The event log: ids increasing without repeats; each attempt's events as it stored them. A
    # result shown was stored with the conversation: each recovery sent it to the model as it was,
    # running neither the lookup nor the refund again.
    async with httpx.AsyncClient(base_url=last.base_url, timeout=30) as client:
        streamed = await read_events(client, thread_id, token, until=finished(resume_id))
        detail = (await client.get(f"/api/threads/{thread_id}", headers=auth(token))).json()
    ids = [e.event_id for e in streamed]
    assert ids == sorted(set(ids))
    logged = await db.events.read(thread_id)
    assert [(e.event_id, e.type) for e in logged] == [(e.event_id, e.type) for e in streamed]
    assert _transcript(logged, {run_id: "message", resume_id: "resume"}) == snapshot(
        [
            "message: run_started message",
            "message: user_message",
            "message: tool_call lookup_order",
            "message: tool_result lookup_order success",
            "message: run_started recover",
            "message: tool_call issue_refund",
            "message: approval_required",
            "message: run_finished awaiting_approval",
            "message: approval_decided approved",
            "resume: run_started resume",
            "resume: tool_result issue_refund success",
            "resume: run_started recover",
            "resume: text_done",
            "resume: run_finished completed",
        ]
    )

    # The conversation: every message once, none missing.
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
    calls = [
        p.tool_call_id
        for m in messages
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart)
    ]
    returns = [p.tool_call_id for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    assert calls == returns
    assert len(set(calls)) == len(calls)
    assert detail["status"] == "idle"


async def test_one_decision_posted_to_every_worker_at_once_resumes_once(
    workers: list[LiveServer], db: Database
) -> None:
    token = workers[0].token("alice")
    clients = [httpx.AsyncClient(base_url=w.base_url, timeout=30) for w in workers]
    try:
        thread_id = await new_thread(clients[0], token)
        [call_id] = approvals_of(await pause(clients[0], token, thread_id, "Please refund ORD-3456"))
        responses = await asyncio.gather(
            *(
                c.post(f"/api/threads/{thread_id}/tool-calls/{call_id}/approve", headers=auth(token))
                for c in clients
            )
        )
        assert [r.status_code for r in responses] == [200, 200, 200]
        [resume_id] = {r.json()["run_id"] for r in responses}
        assert resume_id is not None
        resumed = await _eventually(lambda: _ended(db, resume_id))
    finally:
        for client in clients:
            await client.aclose()
    # Every worker tried to drive it; exactly one claimed it, once.
    assert (resumed.status, resumed.attempt) == ("completed", 1)
    assert await _kinds(db, thread_id) == ["message", "resume"]
    order = await BusinessData(db.engine).get_order("ORD-3456")
    assert order is not None
    assert order.refunded_cents == 2495
    assert await _ledger_rows(db, thread_id) == [("issue_refund", call_id)]


async def test_decisions_on_two_calls_at_two_workers_at_once_resume_once(
    workers: list[LiveServer], db: Database
) -> None:
    token = workers[0].token("alice")
    clients = [httpx.AsyncClient(base_url=w.base_url, timeout=30) for w in workers]
    try:
        thread_id = await new_thread(clients[0], token)
        paused = await pause(clients[0], token, thread_id, "Cancel ORD-9012 and ORD-3456")
        cancel_9012, cancel_3456 = approvals_of(paused)
        base = f"/api/threads/{thread_id}/tool-calls"
        responses = await asyncio.gather(
            clients[1].post(f"{base}/{cancel_9012}/approve", headers=auth(token)),
            clients[2].post(f"{base}/{cancel_3456}/approve", headers=auth(token)),
        )
        assert [r.status_code for r in responses] == [200, 200]
        # The decision that completed the set answers the resume run, the other one `null`.
        answered = sorted((r.json()["run_id"] for r in responses), key=lambda run_id: run_id is None)
        resume_id = answered[0]
        assert resume_id is not None
        assert answered[1] is None
        resumed = await _eventually(lambda: _ended(db, resume_id))
    finally:
        for client in clients:
            await client.aclose()
    assert (resumed.status, resumed.attempt) == ("completed", 1)
    assert await _kinds(db, thread_id) == ["message", "resume"]
    assert sorted(await _ledger_rows(db, thread_id)) == sorted(
        [("cancel_order", cancel_9012), ("cancel_order", cancel_3456)]
    )


async def test_a_worker_shut_down_mid_run_hands_it_over(workers: list[LiveServer], db: Database) -> None:
    first = workers[0]
    token = first.token("alice")
    async with httpx.AsyncClient(base_url=first.base_url, timeout=30) as client:
        thread_id = await new_thread(client, token)
        run_id = await send(client, token, thread_id, "Please refund ORD-5678")
    await _eventually(lambda: _logged(db, run_id, "tool_call", "lookup_order"))
    owner = _owner(await db.runs.get(run_id), workers)
    owner.stop()  # SIGTERM: a graceful shutdown, which parks the run and releases its lease
    paused = await _eventually(lambda: _ended(db, run_id))
    assert paused.status == "awaiting_approval"
    assert paused.attempt == 2
    assert _owner(paused, workers) is not owner
    assert (await db.runs.get(run_id)).checkpoints >= 1


async def test_a_run_cancelled_at_another_worker_ends_at_once_and_its_driver_stores_nothing_more(
    workers: list[LiveServer], db: Database
) -> None:
    token = workers[0].token("alice")
    async with httpx.AsyncClient(base_url=workers[0].base_url, timeout=30) as client:
        thread_id = await new_thread(client, token)
        run_id = await send(client, token, thread_id, "loop forever ORD-5678")
    # A lookup is done and the model thinks about the next one: cancel at a worker not driving it.
    await _eventually(lambda: _logged(db, run_id, "tool_result", "lookup_order"))
    owner = _owner(await db.runs.get(run_id), workers)
    canceller, other = [w for w in workers if w is not owner][:2]
    async with httpx.AsyncClient(base_url=canceller.base_url, timeout=30) as client:
        response = await client.post(f"/api/threads/{thread_id}/cancel", headers=auth(token))
        assert response.status_code == 200, response.text
        assert response.json() == {"run_id": run_id, "status": "cancelled"}
        # Ended at once: the answer came after the run's end was stored.
        assert (await db.runs.get(run_id)).status == "cancelled"
        detail = (await client.get(f"/api/threads/{thread_id}", headers=auth(token))).json()
    assert detail["status"] == "idle"
    cancelled_at = detail["last_event_id"]
    # A follower of the driving worker hears of it too (relayed by notification).
    async with httpx.AsyncClient(base_url=owner.base_url, timeout=30) as client:
        seen = await read_events(client, thread_id, token, until=finished(run_id))
    assert (seen[-1].event_id, seen[-1].data["status"]) == (cancelled_at, "cancelled")

    # The thread takes a new message at once, at a third worker. By the time it is answered the
    # stale driver has woken from its thinking (the new run thinks as long), and was fenced off.
    async with httpx.AsyncClient(base_url=other.base_url, timeout=30) as client:
        next_id = await send(client, token, thread_id, "Where is my order ORD-9012?")
        await read_events(client, thread_id, token, after=cancelled_at, until=finished(next_id))
    logged = await db.events.read(thread_id)
    assert {e.run_id for e in logged if e.event_id > cancelled_at} == {next_id}
    assert [e.type for e in logged if e.run_id == run_id][-1] == "run_finished"
    assert (await db.runs.get(run_id)).status == "cancelled"
    messages = ModelMessagesTypeAdapter.validate_python(detail["messages"])
    assert messages[-1].state == "interrupted"


# -- helpers ----------------------------------------------------------------------------------------


async def _eventually(attempt: Callable[[], Awaitable[T | None]]) -> T:
    """The first truthy result of `attempt`, tried again and again (bounded)."""
    async with asyncio.timeout(DEADLINE):
        while True:
            result = await attempt()
            if result:
                return result
            await asyncio.sleep(0.05)


async def _logged(db: Database, run_id: str, event_type: str, tool_name: str) -> bool:
    run = await db.runs.get(run_id)
    return any(
        e.run_id == run_id and e.type == event_type and json.loads(e.data).get("tool_name") == tool_name
        for e in await db.events.read(run.thread_id)
    )


async def _ended(db: Database, run_id: str) -> Run | None:
    run = await db.runs.get(run_id)
    return None if run.status in {"queued", "running"} else run


def _owner(run: Run, workers: list[LiveServer]) -> LiveServer:
    """The worker named by the run's lease (`host:pid:random`)."""
    assert run.lease_owner is not None
    pid = int(run.lease_owner.split(":")[1])
    [owner] = [w for w in workers if w.pid == pid]
    return owner


async def _kill_owner(db: Database, run_id: str, workers: list[LiveServer]) -> LiveServer:
    run = await db.runs.get(run_id)
    assert run.status == "running"
    owner = _owner(run, workers)
    owner.kill()
    return owner


async def _ledger_rows(db: Database, thread_id: str) -> list[tuple[str, str]]:
    query = sa.select(_ledger.c.tool_name, _ledger.c.tool_call_id).where(_ledger.c.thread_id == thread_id)
    async with db.engine.connect() as connection:
        return [(row[0], row[1]) for row in await connection.execute(query)]


async def _kinds(db: Database, thread_id: str) -> list[str]:
    query = sa.select(_runs.c.kind).where(_runs.c.thread_id == thread_id).order_by(_runs.c.created_at)
    async with db.engine.connect() as connection:
        return list((await connection.execute(query)).scalars())


def _transcript(events: list[LoggedEvent], runs: dict[str, str]) -> list[str]:
    """One line per event but text deltas: the run it belongs to, its type and what it is about."""
    lines: list[str] = []
    for event in events:
        data: dict[str, object] = json.loads(event.data)
        match event.type:
            case "text_delta":
                continue
            case "run_started":
                detail = data["kind"]
            case "tool_call" | "approval_decided":
                detail = data.get("tool_name", data.get("decision"))
            case "tool_result":
                detail = f"{data['tool_name']} {data['outcome']}"
            case "run_finished":
                detail = data["status"]
            case _:
                detail = ""
        lines.append(f"{runs[event.run_id]}: {event.type} {detail}".rstrip())
    return lines
