"""SQLAlchemy's aiosqlite driver, with each statement one trip to the connection's thread.

aiosqlite runs every call on a SQLite connection in a thread of its own; each call is a trip
there and back (a queue put, a thread wake-up, a loop wake-up), which costs far more than the
statement itself. SQLAlchemy's adapter makes three or four trips a statement: create a cursor,
execute, fetch the rows, close the cursor. This adapter does all four in one function run on
that thread, so a statement costs one trip; a turn of the step makes about fifty fewer.

It plugs into SQLAlchemy's own aiosqlite dialect as its DB-API module (`create_async_engine(...,
module=ONE_TRIP_AIOSQLITE)`): URLs, pooling, transactions, errors and server-side cursors stay
SQLAlchemy's. It relies on the same aiosqlite internals SQLAlchemy's adapter already uses (the
connection's queue of calls and its `sqlite3` connection); `tests/test_engine.py` covers it.

The store's hot path goes further (`run_here`): a unit of work (a read, or a transaction that
commits) runs on the event loop's own thread, in the tens of microseconds SQLite takes, instead of
a trip of one to three hundred (two thread wake-ups, the GIL handed over twice, and while the loop
runs a turn's CPU work, a wait for it). Two things must not then happen on the loop:

- **Waiting for the file lock.** Another process writing (a `durable-chat purge`, a second server)
  holds it; the busy handler would sleep for up to 30 s. The unit runs with no busy timeout: when
  the database is busy it is rolled back and run again on the connection's thread, which waits.
- **Checkpointing the WAL.** SQLite copies the WAL into the database, and syncs both, in the
  commit that finds the WAL over 1,000 pages: several milliseconds. The unit runs with automatic
  checkpoints off; once `CHECKPOINT_EVERY` units have written on the loop, units go to the thread
  again until one writes there, where the checkpoint is due.

Both settings stay in force between units on the loop, as most units follow one another there; a
trip to the thread puts its own back first, in the same trip.

It saves CPU a turn and brings the first delta sooner (figures in `docs/benchmarks.md`). The event
log's writer keeps the thread while its process is busy: see `store.event_inserts`.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

import aiosqlite
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.util.concurrency import await_

__all__ = ("BUSY_TIMEOUT_MS", "CHECKPOINT_EVERY", "ONE_TRIP_AIOSQLITE", "run_here", "run_on_thread")

BUSY_TIMEOUT_MS = 30_000
"""How long a statement on a connection's thread waits for another process's lock."""
CHECKPOINT_EVERY = 64
"""Units that wrote on the event loop's thread (no automatic checkpoint) before units go to the
connection's thread until one writes there (where the WAL is checkpointed if over 1,000 pages)."""
_SQLITE_BUSY = 5
_HERE = ("PRAGMA busy_timeout=0", "PRAGMA wal_autocheckpoint=0")
_THERE = (f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}", "PRAGMA wal_autocheckpoint=1000")

_Description = Sequence[tuple[Any, ...]] | None
_T = TypeVar("_T")


class _Outcome:
    """What a statement left on its cursor, kept after the real cursor closed in the thread."""

    __slots__ = ("arraysize", "description", "lastrowid", "rowcount")

    def __init__(self) -> None:
        self.description: _Description = None
        self.rowcount = -1
        self.lastrowid: int | None = None
        self.arraysize = 1

    def close(self) -> None:
        """Nothing to close: the real cursor closed with its statement."""


def _execute(
    connection: sqlite3.Connection, operation: str, parameters: Any
) -> tuple[_Description, list[Any] | None, int, int | None]:
    """Run on the connection's thread: execute, fetch every row, close; return what the cursor held."""
    cursor = connection.cursor()
    try:
        if parameters is None:
            cursor.execute(operation)
        else:
            cursor.execute(operation, parameters)
        description = cursor.description
        rows = cursor.fetchall() if description else None
        return description, rows, cursor.rowcount, cursor.lastrowid
    finally:
        cursor.close()


def _executemany(connection: sqlite3.Connection, operation: str, parameters: Any) -> tuple[int, int | None]:
    cursor = connection.cursor()
    try:
        cursor.executemany(operation, parameters)
        return cursor.rowcount, cursor.lastrowid
    finally:
        cursor.close()


def _tracking(function: Callable[..., _T], pragmas: Sequence[str]) -> Callable[..., tuple[_T, bool]]:
    """`function` after `pragmas`, also returning whether its connection is left inside a transaction."""

    def run(connection: sqlite3.Connection, *args: Any) -> tuple[_T, bool]:
        for pragma in pragmas:
            connection.execute(pragma)
        return function(connection, *args), connection.in_transaction

    return run


async def _on_thread(
    connection: aiosqlite.Connection, pragmas: Sequence[str], function: Callable[..., _T], *args: Any
) -> tuple[_T, bool]:
    """`function(sqlite3 connection, *args)`, run on `connection`'s thread after `pragmas`: one trip.

    Returns what it returned, and whether the connection is then inside a transaction.
    """
    # aiosqlite's queue of calls, which SQLAlchemy's own adapter uses too; no public API runs a
    # function there.
    queue: Callable[..., Awaitable[tuple[_T, bool]]] = connection._execute  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType, reportUnknownVariableType]
    return await queue(_tracking(function, pragmas), connection._conn, *args)  # pyright: ignore[reportPrivateUsage]


async def run_on_thread(adapted: Any, function: Callable[..., _T], *args: Any) -> _T:
    """`function(sqlite3 connection, *args)` on the thread of `adapted`, a connection of `ONE_TRIP_AIOSQLITE`.

    For a unit of work of several statements that needs no answer in between: one trip in all.
    Errors are the `sqlite3` module's, as a DB-API raises them.
    """
    connection: _OneTripConnection = adapted
    return await connection.run(function, *args)


async def run_here(adapted: Any, function: Callable[..., _T], *args: Any) -> _T:
    """`run_on_thread`, but on the event loop's own thread when it can (see the module's notes).

    `function` must be a unit of work that leaves no transaction open (it commits or rolls back),
    may be run again from the start after raising `sqlite3.OperationalError` for a busy database
    (a rolled-back transaction), and appends to its list arguments only (the statements it ran,
    cut back before it runs again). Inside a transaction begun by someone else it goes to the thread.
    """
    connection: _OneTripConnection = adapted
    return await connection.run(function, *args, here=True)


class _OneTripCursor(AsyncAdapt_aiosqlite_cursor):
    __slots__ = ()
    _awaitable_cursor_close = False

    def _make_new_cursor(self, connection: Any) -> Any:
        return _Outcome()

    def _aenter_cursor(self, cursor: Any) -> Any:
        return cursor

    async def _execute_async(self, operation: Any, parameters: Any) -> Any:
        adapted: _OneTripConnection = self._adapt_connection  # pyright: ignore[reportAssignmentType]
        async with adapted._execute_mutex:  # pyright: ignore[reportPrivateUsage]
            outcome: _Outcome = self._cursor  # pyright: ignore[reportAssignmentType]
            description, rows, outcome.rowcount, outcome.lastrowid = await adapted.trip(
                _execute, operation, parameters
            )
            outcome.description = description
            if rows is not None:
                self._rows = deque(rows)
        return None

    async def _executemany_async(self, operation: Any, seq_of_parameters: Any) -> Any:
        adapted: _OneTripConnection = self._adapt_connection  # pyright: ignore[reportAssignmentType]
        async with adapted._execute_mutex:  # pyright: ignore[reportPrivateUsage]
            outcome: _Outcome = self._cursor  # pyright: ignore[reportAssignmentType]
            outcome.description = None
            outcome.rowcount, outcome.lastrowid = await adapted.trip(
                _executemany, operation, seq_of_parameters
            )
        return None


class _OneTripConnection(AsyncAdapt_aiosqlite_connection):
    """SQLAlchemy's adapted aiosqlite connection; commit and rollback skip their trip outside a transaction.

    Every trip reports whether it left the `sqlite3` connection inside a transaction. When it did
    not (an autocommit read, a unit of work that committed on the thread), a commit or rollback,
    such as the pool's reset when the connection goes back, has nothing to do and makes no trip.
    """

    __slots__ = ("_idle", "_settings", "_written_here")
    _cursor_cls = _OneTripCursor

    def __init__(self, dbapi: Any, connection: Any) -> None:
        super().__init__(dbapi, connection)
        self._idle = False  # unknown until a trip says
        self._written_here = 0
        """Units that wrote on the loop's thread since one last wrote on the connection's."""
        self._settings: Literal["here", "there"] | None = None
        """Whose settings the connection has (`_HERE`, `_THERE`); `None`: unknown."""

    async def trip(self, function: Callable[..., _T], *args: Any) -> _T:
        """`function(sqlite3 connection, *args)` on the connection's thread, with its settings there
        (a busy timeout, automatic checkpoints) in force: one trip. The caller holds the mutex."""
        driver: aiosqlite.Connection = self._connection  # pyright: ignore[reportAssignmentType]
        pragmas = () if self._settings == "there" else _THERE
        self._settings = None  # unknown until the trip is back
        try:
            result, in_transaction = await _on_thread(driver, pragmas, function, *args)
        except BaseException:
            self._idle = False  # unknown: the next commit or rollback makes its trip
            raise
        self._settings = "there"
        self._idle = not in_transaction
        return result

    async def run(self, function: Callable[..., _T], *args: Any, here: bool = False) -> _T:
        """`function(sqlite3 connection, *args)` on the connection's thread, or with `here` on the
        loop's when it can (see `run_on_thread`, `run_here`)."""
        driver: aiosqlite.Connection = self._connection  # pyright: ignore[reportAssignmentType]
        async with self._execute_mutex:
            try:
                done = self._run_here(driver, function, args) if here else None
            except BaseException:
                self._idle = False
                raise
            if done is not None:
                result, in_transaction = done
                self._idle = not in_transaction
                return result
            raw: sqlite3.Connection = driver._conn  # pyright: ignore[reportPrivateUsage]
            changes = raw.total_changes
            result = await self.trip(function, *args)
            if here and raw.total_changes != changes:
                self._written_here = 0  # written there: the WAL is checkpointed if due
            return result

    def _run_here(
        self, driver: aiosqlite.Connection, function: Callable[..., _T], args: tuple[Any, ...]
    ) -> tuple[_T, bool] | None:
        """`function` run on the loop's thread, or `None` when it is for the connection's thread."""
        raw: sqlite3.Connection = driver._conn  # pyright: ignore[reportPrivateUsage]
        if raw.in_transaction or self._written_here >= CHECKPOINT_EVERY:
            return None
        lists: list[tuple[list[object], int]] = [
            (arg, len(arg))  # pyright: ignore[reportUnknownArgumentType]
            for arg in args
            if isinstance(arg, list)
        ]
        changes = raw.total_changes
        if self._settings != "here":
            # Left in force after the unit: the next unit here needs them too, and a trip to the
            # thread puts the thread's back first (`trip`).
            self._settings = None
            for pragma in _HERE:
                raw.execute(pragma)
            self._settings = "here"
        try:
            result = function(raw, *args)
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode & 0xFF != _SQLITE_BUSY:
                raise
            if raw.in_transaction:
                raw.rollback()
            for arg, length in lists:
                del arg[length:]  # `function` runs again from the start, on the thread
            return None
        if raw.total_changes != changes:
            self._written_here += 1
        return result, raw.in_transaction

    def commit(self) -> None:
        if not self._idle:
            super().commit()
            self._idle = True

    def rollback(self) -> None:
        if not self._idle:
            super().rollback()
            self._idle = True


class _OneTripModule(AsyncAdapt_aiosqlite_dbapi):
    def connect(self, *arg: Any, **kw: Any) -> AsyncAdapt_aiosqlite_connection:
        # SQLAlchemy's own `connect`, with the adapted connection running statements in one trip.
        creator = kw.pop("async_creator_fn", None)
        connection = creator(*arg, **kw) if creator else aiosqlite.connect(*arg, **kw)
        if creator is None:
            connection._thread.daemon = True  # pyright: ignore[reportPrivateUsage]
        # aiosqlite's connection is the protocol's async DB-API connection, as SQLAlchemy passes it.
        return _OneTripConnection(self, await_(connection))  # pyright: ignore[reportArgumentType]


ONE_TRIP_AIOSQLITE = _OneTripModule(aiosqlite, sqlite3)
"""The DB-API module to give SQLAlchemy's aiosqlite dialect (`module=`)."""
