"""The store's units of work on SQLite run on the event loop's thread, never waiting there for a lock
or checkpointing the WAL there (`store.sqlite_driver.run_here`)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from store import Database, NewEvent, NewRun
from store.compiled import checked_out
from store.engine import create_engine, dispose, normalize_url
from store.sqlite_driver import CHECKPOINT_EVERY, run_here, run_on_thread

from .conftest import MigratedDatabases

pytestmark = pytest.mark.anyio

_PAGE_BLOB = b"x" * 70_000
"""A value that fills about 17 of SQLite's 4 KiB pages."""


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(normalize_url(f"sqlite:///{tmp_path / 'here.db'}"))
    await _unit(engine, run_on_thread, _create)
    yield engine
    await dispose(engine)


def _create(connection: sqlite3.Connection) -> None:
    connection.execute("CREATE TABLE items (item_id INTEGER PRIMARY KEY, value BLOB)")
    connection.commit()


async def _unit(
    engine: AsyncEngine, runner: Callable[..., Any], function: Callable[..., Any], *args: Any
) -> Any:
    """`function` run by `runner` (`run_here`, `run_on_thread`) on a connection of `engine`'s pool."""

    async def work(pooled: Any) -> Any:
        return await runner(pooled.dbapi_connection, function, *args)

    return await checked_out(engine, "unit", work)


class _Insert:
    """A unit of work inserting a row and committing; notes the thread of each run and its statements."""

    def __init__(self, value: bytes = b"v") -> None:
        self.value = value
        self.threads: list[int] = []
        self.settings: list[tuple[int, int]] = []
        """`busy_timeout` and `wal_autocheckpoint` as each run found them."""
        self.on_thread = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def __call__(self, connection: sqlite3.Connection, ran: list[str]) -> None:
        self.threads.append(threading.get_ident())
        self.settings.append(_settings(connection))
        if threading.get_ident() != threading.main_thread().ident:
            self._loop.call_soon_threadsafe(self.on_thread.set)
        try:
            ran.append("INSERT items")
            connection.execute("INSERT INTO items (value) VALUES (?)", (self.value,))
            connection.commit()
            ran.append("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.rollback()
            raise


def _settings(connection: sqlite3.Connection) -> tuple[int, int]:
    busy = connection.execute("PRAGMA busy_timeout").fetchone()[0]
    return busy, connection.execute("PRAGMA wal_autocheckpoint").fetchone()[0]


def _count(connection: sqlite3.Connection) -> int:
    return connection.execute("SELECT count(*) FROM items").fetchone()[0]


def _thread_of(connection: sqlite3.Connection) -> int | None:
    return threading.get_ident()


async def test_a_unit_runs_on_the_loops_own_thread(engine: AsyncEngine) -> None:
    insert, ran = _Insert(), list[str]()
    await _unit(engine, run_here, insert, ran)
    assert insert.threads == [threading.get_ident()]
    # Here, nothing waits for a lock nor checkpoints; the driver's thread still does both.
    assert insert.settings == [(0, 0)]
    assert await _unit(engine, run_on_thread, _settings) == (30_000, 1_000)
    assert ran == ["INSERT items", "COMMIT"]
    assert await _unit(engine, run_on_thread, _count) == 1  # committed, seen by the driver's thread
    assert await _unit(engine, run_on_thread, _thread_of) != threading.get_ident()


async def test_a_busy_database_is_waited_for_on_the_drivers_thread_not_the_loops(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    # Another process's writer holds the file's lock.
    other = sqlite3.connect(tmp_path / "here.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    insert, ran = _Insert(), list[str]()
    task = asyncio.create_task(_unit(engine, run_here, insert, ran))
    # Refused at once on the loop's thread, the unit waits on the driver's: the loop runs on.
    await asyncio.wait_for(insert.on_thread.wait(), 30)
    assert not task.done()
    other.execute("COMMIT")
    other.close()
    await task
    assert insert.threads[0] == threading.get_ident() != insert.threads[1]
    assert insert.settings == [(0, 0), (30_000, 1_000)]
    assert ran == ["INSERT items", "COMMIT"]  # the first run's statements are not counted twice
    assert await _unit(engine, run_here, _count) == 1


async def test_the_wal_is_checkpointed_on_the_drivers_thread(engine: AsyncEngine, tmp_path: Path) -> None:
    database = tmp_path / "here.db"
    before = database.stat().st_size
    # Units that write on the loop's thread never checkpoint: the WAL grows past 1,000 pages.
    for _ in range(CHECKPOINT_EVERY):
        insert = _Insert(_PAGE_BLOB)
        await _unit(engine, run_here, insert, [])
        assert insert.threads == [threading.get_ident()]
    assert database.stat().st_size == before
    # Then units go to the driver's thread until one writes there, checkpointing the WAL.
    assert await _unit(engine, run_here, _thread_of) != threading.get_ident()
    insert = _Insert()
    await _unit(engine, run_here, insert, [])
    assert insert.threads != [threading.get_ident()]
    assert database.stat().st_size > CHECKPOINT_EVERY * len(_PAGE_BLOB)
    assert await _unit(engine, run_here, _thread_of) == threading.get_ident()


async def test_inside_a_transaction_begun_elsewhere_a_unit_goes_to_the_drivers_thread(
    engine: AsyncEngine,
) -> None:
    async with engine.begin() as connection:
        await connection.exec_driver_sql("INSERT INTO items (value) VALUES ('first')")
        pooled = await connection.get_raw_connection()
        assert await run_here(pooled.dbapi_connection, _thread_of) != threading.get_ident()


async def test_the_event_logs_writer_keeps_the_drivers_thread_unless_the_process_is_quiet(
    migrated_databases: MigratedDatabases,
) -> None:
    # A busy process's writer groups the events that come during its slower trip into its next
    # transaction; a quiet one has nothing to group, and stores at once on the loop's thread.
    db = await Database.connect(await migrated_databases.empty("sqlite"))
    try:
        thread = await db.threads.create(user_id="alice", title="t")
        run = (await db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="hi"))).run
        first = await db.events.reserve(thread.thread_id, 2)
        trips: list[int] = []
        for event_id, quiet in ((first, False), (first + 1, True)):
            with _counting_trips() as counted:
                await db.events.insert(
                    thread.thread_id, [(event_id, NewEvent(run.run_id, "text_delta", b"{}"))], quiet=quiet
                )
            trips.append(counted[0])
        assert trips == [1, 0]
        assert [e.event_id for e in await db.events.read(thread.thread_id)] == [first, first + 1]
    finally:
        await db.aclose()


async def test_a_threads_creation_is_a_unit_on_the_loops_thread(
    migrated_databases: MigratedDatabases,
) -> None:
    db = await Database.connect(await migrated_databases.empty("sqlite"))
    try:
        await db.threads.create(user_id="alice", title="warm")  # the pool's connection opened
        with _counting_trips() as counted:
            thread = await db.threads.create(user_id="alice", title="t")
        assert counted == [0]
        assert (await db.threads.get(thread.thread_id, user_id="alice")).title == "t"
    finally:
        await db.aclose()


@contextmanager
def _counting_trips() -> Iterator[list[int]]:
    """How many calls are queued to any aiosqlite connection's thread inside the block."""
    counted = [0]
    queued = aiosqlite.Connection._execute  # pyright: ignore[reportPrivateUsage]

    async def counting(self: aiosqlite.Connection, *args: Any, **named: Any) -> Any:
        counted[0] += 1
        return await queued(self, *args, **named)

    aiosqlite.Connection._execute = counting  # type: ignore[method-assign]  # pyright: ignore[reportAttributeAccessIssue]
    try:
        yield counted
    finally:
        aiosqlite.Connection._execute = queued  # type: ignore[method-assign]  # pyright: ignore[reportAttributeAccessIssue]


class _Traced:
    """A unit of work inserting a row, noting every statement its connection ran since the last one."""

    def __init__(self) -> None:
        self.statements: list[list[str]] = []

    def __call__(self, connection: sqlite3.Connection, ran: list[str]) -> None:
        connection.set_trace_callback(None)
        if self.statements:
            self.statements[-1].append("(unit)")
        self.statements.append([])
        try:
            connection.execute("INSERT INTO items (value) VALUES ('v')")
            connection.commit()
        finally:
            connection.set_trace_callback(self.statements[-1].append)


async def test_units_in_a_row_on_the_loops_thread_switch_its_settings_once(engine: AsyncEngine) -> None:
    traced = _Traced()
    for _ in range(3):
        await _unit(engine, run_here, traced, [])
    await _unit(engine, run_on_thread, traced, [])
    await _unit(engine, run_here, traced, [])
    # Between units here, nothing but the units; the thread's trip puts its settings back first,
    # and the next unit here takes the loop's again.
    assert traced.statements[:-1] == [
        ["(unit)"],
        ["(unit)"],
        ["PRAGMA busy_timeout=30000", "PRAGMA wal_autocheckpoint=1000", "(unit)"],
        ["PRAGMA busy_timeout=0", "PRAGMA wal_autocheckpoint=0", "(unit)"],
    ]
    assert await _unit(engine, run_here, _count) == 5


async def test_a_statement_after_a_unit_here_has_the_threads_settings(engine: AsyncEngine) -> None:
    await _unit(engine, run_here, _Insert(), [])
    # The engine's one pooled connection, through SQLAlchemy: it waits for a lock, checkpoints.
    async with engine.connect() as connection:
        busy = await connection.exec_driver_sql("PRAGMA busy_timeout")
        assert busy.scalar() == 30_000
        checkpoints = await connection.exec_driver_sql("PRAGMA wal_autocheckpoint")
        assert checkpoints.scalar() == 1_000
