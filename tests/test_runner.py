"""The runner and the step under leases, in process, on SQLite and PostgreSQL.

Two `Runtime`s of the core tests' own app on one database stand for two workers. A worker "stalls"
by thinking long (its scripted model's delay) with no heartbeat, so its lease lapses and the other one
takes over. Each worker has a model of its own; a run looks a balance up, then asks for a transfer,
which pauses it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import TypeVar

import pytest
import sqlalchemy as sa

from agent import Runtime, RuntimeOptions, open_runtime, run_step
from store import NewRun, Run, Worker
from store.schema import RunRow, metadata
from worker import Runner

from .conftest import MigratedDatabases
from .core_app import CoreFactory, core_app
from .scripted import Calls, Script
from .step_app import shapes

pytestmark = pytest.mark.anyio

T = TypeVar("T")

SHORT = timedelta(milliseconds=300)
LONG = timedelta(seconds=60)
DEADLINE = 30.0

OpenRuntime = Callable[..., Awaitable[Runtime]]

_runs = metadata.tables[RunRow.__tablename__]


@pytest.fixture(params=[pytest.param("sqlite"), pytest.param("postgresql", marks=pytest.mark.postgres)])
async def open_worker(
    request: pytest.FixtureRequest, migrated_databases: MigratedDatabases
) -> AsyncIterator[OpenRuntime]:
    """Opens worker runtimes on one empty database: `await open_worker("a", lease=..., delay=...)`."""
    url = await migrated_databases.empty(request.param)
    async with AsyncExitStack() as stack:

        async def open_one(worker_id: str, *, lease: timedelta = LONG, delay: float = 0.0) -> Runtime:
            options = RuntimeOptions(worker=Worker(worker_id=worker_id, lease=lease))
            app = core_app(_pausing(delay))
            return await stack.enter_async_context(open_runtime(app, url, options=options))

        yield open_one


def _pausing(delay: float) -> Script:
    lookup = Calls([("lookup", {"key": "balance"})])
    return Script([lookup, Calls([("transfer", {"to": "bob", "amount": 25.5})])], delay=delay)


async def _queued(runtime: Runtime, content: str = "Send bob 25.50") -> Run:
    thread = await runtime.db.threads.create(user_id="alice", title="t")
    run = (
        await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content=content))
    ).run
    return run


async def _eventually(attempt: Callable[[], Awaitable[T | None]]) -> T:
    async with asyncio.timeout(DEADLINE):
        while True:
            result = await attempt()
            if result:
                return result
            await asyncio.sleep(0.05)


async def test_a_stalled_worker_is_fenced_out_and_stops_quietly(open_worker: OpenRuntime) -> None:
    stalled = await open_worker("stalled", lease=SHORT, delay=2.0)
    heir = await open_worker("heir")
    run = await _queued(stalled)
    first = asyncio.create_task(run_step(stalled, run.run_id))
    await _eventually(lambda: _running(stalled, run.run_id))
    # Its lease lapses while it waits for the model; the heir takes the run and pauses it.
    status = await _eventually(
        lambda: _unless(run_step(heir, run.run_id), "running"),
    )
    assert status == "awaiting_approval"
    # The stalled attempt's next checkpoint is refused: it stops, neither failing nor requeueing the run.
    assert await first == "awaiting_approval"
    ended = await heir.db.runs.get(run.run_id)
    assert (ended.status, ended.attempt, ended.lease_owner, ended.error) == (
        "awaiting_approval",
        2,
        "heir",
        None,
    )
    conversation = await heir.db.conversations.load(run.thread_id)
    assert conversation is not None
    assert shapes(conversation.messages) == [
        "request: user-prompt",
        "response: tool-call(lookup)",
        "request: tool-return(lookup)",
        "response: tool-call(transfer)",
    ]
    assert len(await heir.db.approvals.list(thread_id=run.thread_id, status="pending")) == 1


async def test_a_runner_stops_the_runs_another_worker_took_over(open_worker: OpenRuntime) -> None:
    stalled_runtime, heir_runtime = (
        await open_worker("stalled", lease=SHORT, delay=30.0),
        await open_worker("heir"),
    )
    stalled, heir = Runner(stalled_runtime), Runner(heir_runtime)
    run = await _queued(stalled_runtime)
    stalled.submit(run.run_id)
    await _eventually(lambda: _running(stalled_runtime, run.run_id))
    # No heartbeat ran: once the lease lapses, the heir's sweep takes the run over.
    assert await _eventually(heir.sweep) == 1
    assert await stalled.heartbeat() == [run.run_id]
    await _eventually(lambda: _true(stalled.in_flight == 0))
    ended = await _eventually(lambda: _ended(heir_runtime, run.run_id))
    assert (ended.status, ended.attempt, ended.lease_owner) == ("awaiting_approval", 2, "heir")
    await heir.aclose()
    await stalled.aclose()


async def test_a_runner_shutting_down_releases_its_runs(open_worker: OpenRuntime) -> None:
    leaving_runtime = await open_worker("leaving", delay=30.0)
    leaving = Runner(leaving_runtime, shutdown_timeout=0.1)
    run = await _queued(leaving_runtime)
    leaving.submit(run.run_id)
    await _eventually(lambda: _running(leaving_runtime, run.run_id))
    await leaving.aclose()
    parked = await leaving_runtime.db.runs.get(run.run_id)
    assert (parked.status, parked.lease_owner, parked.lease_expires_at) == ("queued", None, None)
    # Another worker starting now takes it at once: nobody holds it.
    staying_runtime = await open_worker("staying")
    staying = Runner(staying_runtime)
    assert await staying.start() == 1
    ended = await _eventually(lambda: _ended(staying_runtime, run.run_id))
    assert (ended.status, ended.attempt, ended.lease_owner) == ("awaiting_approval", 2, "staying")
    await staying.aclose()


async def test_a_starting_runner_leaves_live_runs_alone(open_worker: OpenRuntime) -> None:
    live = await open_worker("live", delay=30.0)
    run = await _queued(live)
    task = asyncio.create_task(run_step(live, run.run_id))
    await _eventually(lambda: _running(live, run.run_id))
    starting = Runner(await open_worker("starting"))
    assert await starting.start() == 0
    assert await starting.sweep() == 0
    assert (await live.db.runs.get(run.run_id)).lease_owner == "live"
    await starting.aclose()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Cancelled, its own worker put it back in the queue.
    assert (await live.db.runs.get(run.run_id)).status == "queued"


async def _unless(status: Awaitable[str], busy: str) -> str | None:
    result = await status
    return None if result == busy else result


async def _true(value: bool) -> bool:
    return value


async def _running(runtime: Runtime, run_id: str) -> bool:
    return (await runtime.db.runs.get(run_id)).status == "running"


async def _ended(runtime: Runtime, run_id: str) -> Run | None:
    run = await runtime.db.runs.get(run_id)
    return None if run.status in {"queued", "running"} else run


async def test_a_run_is_queued_claimed_only_while_the_runner_has_a_free_slot(
    core_factory: CoreFactory,
) -> None:
    app = await core_factory(Script([], then="Sure."))
    runner = Runner(app.runtime, max_concurrent=1)
    first, second = await app.thread(), await app.thread()
    try:
        claimed = await runner.queue(first.thread_id, "message", content="Hello")
        # The only slot is taken: the next run is queued free, for this worker's next slot (or a sweep).
        free = await runner.queue(second.thread_id, "message", content="Hello")
        assert claimed.claimed is not None
        assert free.claimed is None
        me = runner.worker_id
        assert (claimed.run.status, claimed.run.lease_owner, claimed.run.attempt) == ("running", me, 1)
        assert (free.run.status, free.run.lease_owner, free.run.attempt) == ("queued", None, 0)
        names = {f"run {q.run.run_id}" for q in (claimed, free)}
        tasks = [t for t in asyncio.all_tasks() if t.get_name() in names]
        assert len(tasks) == 2
        await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE)
    finally:
        await runner.aclose()
    ended = [await app.db.runs.get(q.run.run_id) for q in (claimed, free)]
    # Both answered, once, whichever way they were claimed.
    assert [(run.status, run.attempt, run.lease_owner) for run in ended] == [("completed", 1, me)] * 2


async def test_a_runner_compacts_the_deltas_of_runs_finished_past_its_replay_window(
    core_factory: CoreFactory,
) -> None:
    app = await core_factory(Script([], then="Sure, here it is."))
    keeping, compacting = Runner(app.runtime), Runner(app.runtime, replay_window=timedelta(0))
    thread = await app.thread()
    try:
        queued = await keeping.queue(thread.thread_id, "message", content="Hello")
        (task,) = [t for t in asyncio.all_tasks() if t.get_name() == f"run {queued.run.run_id}"]
        await asyncio.wait_for(task, DEADLINE)
        types = [event.type for event in await app.db.events.read(thread.thread_id)]
        assert "text_delta" in types
        assert await keeping.compact() == 0  # no window: everything is kept
        assert await compacting.compact() == types.count("text_delta")
    finally:
        await keeping.aclose()
        await compacting.aclose()
    after = [event.type for event in await app.db.events.read(thread.thread_id)]
    assert after == [kind for kind in types if kind != "text_delta"]
    assert after[-2:] == ["text_done", "run_finished"]


@pytest.mark.parametrize(
    "open_worker", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)
async def test_a_run_whose_claim_missed_is_not_kept_reserved(
    open_worker: OpenRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = await open_worker("sweeper")
    runner = Runner(runtime, sweep_seconds=0.0)
    run = await _queued(runtime)
    # This worker's sweep reserves the run (as `Runner.sweep` does before it submits it).
    assert await runtime.db.leases.sweep(limit=1, queued_for=timedelta(0)) == [run.run_id]
    claimed = asyncio.Event()
    claim = runtime.db.runs.start_reserving

    async def watched_claim(run_id: str, *, events: int, trace_id: str | None = None) -> object:
        try:
            return await claim(run_id, events=events, trace_id=trace_id)
        finally:
            claimed.set()

    monkeypatch.setattr(runtime.db.runs, "start_reserving", watched_claim)
    # Its task claims it while the row is locked for a moment (as this worker's own heartbeat
    # renewing the reservation locks it): the claim skips the row and gets nothing.
    async with runtime.db.engine.begin() as connection:
        await connection.execute(
            sa.select(_runs.c.run_id).where(_runs.c.run_id == run.run_id).with_for_update()
        )
        runner.submit(run.run_id)
        await asyncio.wait_for(claimed.wait(), DEADLINE)
    await _eventually(lambda: _true(runner.in_flight == 0))
    # Nobody drives it: it is back in the queue rather than reserved for this worker, whose heartbeat
    # would keep the reservation alive for ever. The next sweep takes it and drives it to its end.
    missed = await runtime.db.runs.get(run.run_id)
    assert (missed.status, missed.lease_owner, missed.attempt) == ("queued", None, 0)
    assert await runner.sweep() == 1
    ended = await _eventually(lambda: _ended(runtime, run.run_id))
    assert (ended.status, ended.attempt, ended.lease_owner) == ("awaiting_approval", 1, "sweeper")
    await runner.aclose()


async def test_a_heartbeat_renews_only_the_runs_its_runner_drives(open_worker: OpenRuntime) -> None:
    runtime = await open_worker("holder")
    runner = Runner(runtime)
    run = await _queued(runtime)
    # Reserved for this worker, but no task of its drives it (its claim missed, say).
    assert await runtime.db.leases.sweep(limit=1, queued_for=timedelta(0)) == [run.run_id]
    reserved = await runtime.db.runs.get(run.run_id)
    assert await runner.heartbeat() == []
    # Not renewed: the reservation lapses, and any worker's sweep then takes the run.
    assert (await runtime.db.runs.get(run.run_id)).lease_expires_at == reserved.lease_expires_at
    await runner.aclose()
