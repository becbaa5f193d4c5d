"""The run's event-log sink, on SQLite and PostgreSQL: stored before published, group commit, fencing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import timedelta

import anyio
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from agent.eventlog import EventLogOptions, EventLogSink
from store import Database, EventLog, LeaseLost, NewEvent, NewRun, Run, Worker
from store.schema import RunRow, metadata, now_utc
from stream import RunFinished, StoredEvent, TextDelta

from .conftest import MigratedDatabases

pytestmark = pytest.mark.anyio

_runs = metadata.tables[RunRow.__tablename__]


class _Committed(EventLog):
    """The event log, noting the ids of every event whose transaction committed."""

    def __init__(self, engine: AsyncEngine, committed: set[int]) -> None:
        super().__init__(engine)
        self.committed = committed
        self.transactions = 0
        self.started = 0
        self.quiet: list[bool] = []
        """What each transaction was told of the process (`quiet`)."""
        self.gate: asyncio.Event | None = None
        """When set, each transaction waits for it to open (after `held` is set)."""
        self.held = asyncio.Event()

    async def insert(
        self,
        thread_id: str,
        events: Sequence[tuple[int, NewEvent]],
        *,
        run_id: str | None = None,
        worker_id: str | None = None,
        quiet: bool = False,
    ) -> None:
        self.started += 1
        self.quiet.append(quiet)
        if self.gate is not None:
            self.held.set()
            await self.gate.wait()
        await super().insert(thread_id, events, run_id=run_id, worker_id=worker_id, quiet=quiet)
        self.committed.update(event_id for event_id, _ in events)
        self.transactions += 1


class _Published:
    """A publisher that checks every event it gets is committed already."""

    def __init__(self, committed: set[int]) -> None:
        self.committed = committed
        self.events: list[StoredEvent] = []
        self.calls = 0
        self.arrived = asyncio.Event()

    def __call__(self, thread_id: str, events: Sequence[StoredEvent]) -> None:
        assert {stored.event_id for stored in events} <= self.committed, "published before stored"
        self.events.extend(events)
        self.calls += 1
        self.arrived.set()


@pytest.fixture(params=[pytest.param("sqlite"), pytest.param("postgresql", marks=pytest.mark.postgres)])
async def workers(
    request: pytest.FixtureRequest, migrated_databases: MigratedDatabases
) -> AsyncIterator[tuple[Database, Database]]:
    """Two workers (processes) on one empty database."""
    url = await migrated_databases.empty(request.param)
    first = await Database.connect(url, worker=Worker(worker_id="w1"))
    second = await Database.connect(url, worker=Worker(worker_id="w2"))
    try:
        yield first, second
    finally:
        await first.aclose()
        await second.aclose()


async def _running(db: Database) -> tuple[Run, int]:
    """A run this worker claimed, and the first of the 128 event ids it reserved."""
    thread = await db.threads.create(user_id="alice", title="t")
    run = (await db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="hi"))).run
    started = await db.runs.start_reserving(run.run_id, events=128)
    assert started is not None
    return started[0], started[2]


def _logged(db: Database) -> tuple[_Committed, _Published]:
    """The event log of `db`, noting what committed, and a publisher checking against it."""
    committed: set[int] = set()
    return _Committed(db.engine, committed), _Published(committed)


def _sink(
    log: _Committed,
    published: _Published,
    run: Run,
    first_id: int,
    *,
    reserved: tuple[int, int] | None = None,
    interval: float = 0.05,
    last_id: int = 0,
    hurry: Callable[[], bool] | None = None,
    quiet: Callable[[], bool] | None = None,
    pace: Callable[[], float] | None = None,
) -> EventLogSink:
    """A sink of `run` (its worker's) through `log`, from the 128 ids it reserved at `first_id`
    unless `reserved` says otherwise; the rest as `EventLogSink` takes it."""
    paced = EventLogOptions(publish=published, interval=interval)
    paced = replace(paced, hurry=hurry) if hurry is not None else paced
    paced = replace(paced, quiet=quiet) if quiet is not None else paced
    paced = replace(paced, pace=pace) if pace is not None else paced
    return EventLogSink(log, run, reserved=reserved or (first_id, 128), last_id=last_id, options=paced)


def _delta(run: Run, n: int, part_id: str = "p") -> TextDelta:
    return TextDelta(run_id=run.run_id, part_id=part_id, delta=f"{n} ")


async def test_events_are_published_only_once_stored_and_in_batches(
    workers: tuple[Database, Database],
) -> None:
    db, _ = workers
    run, first_id = await _running(db)
    log, published = _logged(db)
    # The writer's interval is an hour: no clock decides anything below, only the order of events.
    sink = _sink(log, published, run, first_id, interval=3600)
    for n in range(50):
        await sink.emit(_delta(run, n))
    assert published.events == []  # nothing is out before its transaction commits
    # Emitting never waited for the database: the 50 events go in one transaction.
    await sink.flush()
    assert log.transactions == 1
    assert [stored.event_id for stored in published.events] == list(range(first_id, first_id + 50))
    # A model streaming tokens faster than the writer's interval, the loop turning between them:
    # the flush's transaction counts as the writer's previous one, so the writer waits its
    # interval and the tokens queue meanwhile; the next flush stores them in one transaction, not
    # one each.
    for n in range(50, 200):
        await sink.emit(_delta(run, n))
        await asyncio.sleep(0)
    assert len(published.events) == 50  # none of them is out before its transaction
    await sink.flush()
    await sink.aclose()
    assert log.transactions - 1 == 1
    ids = [stored.event_id for stored in published.events]
    assert ids == list(range(first_id, first_id + 200))
    logged = await db.events.read(run.thread_id)
    assert [e.event_id for e in logged] == ids


async def test_the_writer_waits_the_pace_it_is_given_at_each_transaction(
    workers: tuple[Database, Database],
) -> None:
    db, _ = workers
    run, first_id = await _running(db)
    log, published = _logged(db)
    asked: list[float] = []

    def pace() -> float:
        asked.append(3600.0)  # a busy process's: an hour, whatever the interval (none)
        return asked[-1]

    sink = _sink(log, published, run, first_id, interval=0, pace=pace)
    await sink.emit(_delta(run, 0))  # the writer idle: its transaction starts at once
    await _published(published, 1)
    for n in range(1, 20):
        await sink.emit(_delta(run, n))
        await asyncio.sleep(0)
    assert log.started == 1  # the rest wait for the pace, not the interval
    assert len(asked) == 1  # asked as the transaction started, for the next one
    await sink.flush()
    await sink.aclose()
    assert log.transactions == 2
    assert [stored.event_id for stored in published.events] == list(range(first_id, first_id + 20))


async def test_a_checkpoint_takes_the_queued_events_after_the_write_in_flight(
    workers: tuple[Database, Database],
) -> None:
    db, _ = workers
    run, first_id = await _running(db)
    log, published = _logged(db)
    sink = _sink(log, published, run, first_id, interval=0)  # a transaction as soon as there is an event
    log.gate = asyncio.Event()  # the writer's transaction stays in flight until it opens
    await sink.emit(_delta(run, 0))
    with anyio.fail_after(20):
        await log.held.wait()  # the writer's transaction is in flight
    await sink.emit(_delta(run, 1))
    taking = asyncio.create_task(sink.take_pending())  # runs before the writer wakes: it waits for it
    log.gate.set()
    pending = await taking
    # The write in flight committed and was published first; the checkpoint holds the rest.
    assert [stored.event_id for stored in published.events] == [first_id]
    assert [stored.event_id for stored in pending] == [first_id + 1]
    await sink.emit(_delta(run, 2))
    await asyncio.sleep(0.05)
    assert len(published.events) == 1  # the writer waits for the checkpoint's transaction
    await db.events.insert(
        run.thread_id, [(s.event_id, NewEvent(run.run_id, "text_delta", b"{}")) for s in pending]
    )
    log.committed.update(s.event_id for s in pending)
    sink.stored(pending)
    await sink.flush()
    assert [stored.event_id for stored in published.events] == [first_id, first_id + 1, first_id + 2]


async def test_a_worker_that_lost_the_run_stores_and_publishes_nothing(
    workers: tuple[Database, Database],
) -> None:
    first, second = workers
    run, first_id = await _running(first)
    log, published = _logged(first)
    sink = _sink(log, published, run, first_id, interval=0)
    await sink.emit(_delta(run, 0))
    await sink.flush()
    # The lease lapses and the second worker takes the run over.
    async with first.engine.begin() as connection:
        await connection.execute(_runs.update().values(lease_expires_at=now_utc() - timedelta(seconds=1)))
    assert await second.runs.start_reserving(run.run_id, events=128) is not None
    # The background writer's transaction is refused; the next emit says so.
    with pytest.raises(LeaseLost):
        await _emit_until_refused(sink, run)
    with pytest.raises(LeaseLost):
        await sink.flush()
    assert [e.event_id for e in await first.events.read(run.thread_id)] == [first_id]
    assert [stored.event_id for stored in published.events] == [first_id]


async def _emit_until_refused(sink: EventLogSink, run: Run) -> None:
    """Emit an event every 10 ms until the sink raises (within 20 s)."""
    with anyio.fail_after(20):
        while True:
            await sink.emit(_delta(run, 1))
            await asyncio.sleep(0.01)


async def test_the_first_word_of_a_text_part_is_stored_at_once_while_the_process_is_quiet(
    workers: tuple[Database, Database],
) -> None:
    db, _ = workers
    run, first_id = await _running(db)
    log, published = _logged(db)
    quiet = True
    # A transaction stored the run's first event just now: the writer's next waits an hour after it.
    sink = _sink(
        log,
        published,
        run,
        first_id,
        reserved=(first_id + 1, 127),
        interval=3600,
        last_id=first_id,
        hurry=lambda: quiet,
        quiet=lambda: not log.quiet,  # quiet for the first transaction only
    )
    await sink.emit(_delta(run, 0, "a"))  # a part's first word: stored and published at once
    await _published(published, 1)
    await sink.emit(_delta(run, 1, "a"))  # not its first: waits for the writer's turn
    quiet = False
    await sink.emit(_delta(run, 2, "b"))  # a busy process's first word waits too
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # time for a writer started at once to begin its transaction
    assert log.started == 1
    quiet = True
    await sink.emit(_delta(run, 3, "c"))  # the writer, waiting for its turn, starts now
    await _published(published, 4)
    assert log.started == 2
    assert log.quiet == [True, False]  # each transaction told how busy the process was as it started
    assert [stored.event_id for stored in published.events] == list(range(first_id + 1, first_id + 5))
    await sink.aclose()


async def _published(published: _Published, count: int) -> None:
    """Until `count` events are published (within 20 s)."""
    with anyio.fail_after(20):
        while len(published.events) < count:
            published.arrived.clear()
            await published.arrived.wait()


async def _loop_turns(emitted: Awaitable[None]) -> int:
    """How many times the event loop ran its ready callbacks while `emitted` was awaited (0 or 1)."""
    turns = 0

    def turned() -> None:
        nonlocal turns
        turns += 1

    handle = asyncio.get_running_loop().call_soon(turned)
    await emitted
    handle.cancel()
    return turns


async def test_while_the_first_words_transaction_is_in_flight_each_emit_lets_the_loop_turn(
    workers: tuple[Database, Database],
) -> None:
    """A model streaming without pause keeps the loop: its first word's commit would not be read
    (nor the word published) until the run next waits, often its last checkpoint."""
    db, _ = workers
    run, first_id = await _running(db)
    log, published = _logged(db)
    log.gate = asyncio.Event()  # the writer's transaction stays in flight until it opens
    quiet = True
    sink = _sink(log, published, run, first_id, interval=3600, hurry=lambda: quiet)
    assert await _loop_turns(sink.emit(_delta(run, 0))) == 0  # the writer is started, not yet writing
    with anyio.fail_after(20):
        await log.held.wait()
    assert await _loop_turns(sink.emit(_delta(run, 1))) == 1  # in flight: the loop turns
    quiet = False
    assert await _loop_turns(sink.emit(_delta(run, 2))) == 0  # a busy process's loop turns anyway
    quiet = True
    log.gate.set()
    await _published(published, 1)
    assert await _loop_turns(sink.emit(_delta(run, 3))) == 0  # nothing in flight
    await sink.aclose()
    assert [stored.event_id for stored in published.events] == [first_id]


async def test_a_runs_end_is_stored_only_by_the_transaction_that_ends_the_run(
    workers: tuple[Database, Database],
) -> None:
    # Neither a flush nor the writer stores `run_finished`: only the run's end transaction takes it
    # (`take_pending`), so a failed or never-run end leaves no end stored, nor shown.
    db, _ = workers
    run, first_id = await _running(db)
    log, published = _logged(db)
    sink = _sink(log, published, run, first_id, interval=0)
    await sink.emit(_delta(run, 0))
    await sink.emit(RunFinished(run_id=run.run_id, status="completed", output="0"))
    await sink.flush()
    await sink.aclose()  # the writer, if any, has stored what it would
    assert [e.type for e in await db.events.read(run.thread_id)] == ["text_delta"]
    assert [s.event.type for s in published.events] == ["text_delta"]
    assert sink.held == 1
    pending = await sink.take_pending()
    assert [s.event.type for s in pending] == ["run_finished"]
    sink.put_back(pending)
    assert sink.drop_held() == 1  # an end whose transaction failed is forgotten
    await sink.flush()
    assert [e.type for e in await db.events.read(run.thread_id)] == ["text_delta"]
