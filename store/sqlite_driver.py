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
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import aiosqlite
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.util.concurrency import await_

__all__ = ("ONE_TRIP_AIOSQLITE", "run_on_thread")

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


def _tracking(function: Callable[..., _T]) -> Callable[..., tuple[_T, bool]]:
    """`function`, also returning whether its connection is left inside a transaction."""

    def run(connection: sqlite3.Connection, *args: Any) -> tuple[_T, bool]:
        return function(connection, *args), connection.in_transaction

    return run


async def _on_thread(
    connection: aiosqlite.Connection, function: Callable[..., _T], *args: Any
) -> tuple[_T, bool]:
    """`function(sqlite3 connection, *args)`, run on `connection`'s thread: one trip.

    Returns what it returned, and whether the connection is then inside a transaction.
    """
    # aiosqlite's queue of calls, which SQLAlchemy's own adapter uses too; no public API runs a
    # function there.
    queue: Callable[..., Awaitable[tuple[_T, bool]]] = connection._execute  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType, reportUnknownVariableType]
    return await queue(_tracking(function), connection._conn, *args)  # pyright: ignore[reportPrivateUsage]


async def run_on_thread(adapted: Any, function: Callable[..., _T], *args: Any) -> _T:
    """`function(sqlite3 connection, *args)` on the thread of `adapted`, a connection of `ONE_TRIP_AIOSQLITE`.

    For a unit of work of several statements that needs no answer in between: one trip in all.
    Errors are the `sqlite3` module's, as a DB-API raises them.
    """
    connection: _OneTripConnection = adapted
    return await connection.run(function, *args)


class _OneTripCursor(AsyncAdapt_aiosqlite_cursor):
    __slots__ = ()
    _awaitable_cursor_close = False

    def _make_new_cursor(self, connection: Any) -> Any:
        return _Outcome()

    def _aenter_cursor(self, cursor: Any) -> Any:
        return cursor

    async def _execute_async(self, operation: Any, parameters: Any) -> Any:
        async with self._adapt_connection._execute_mutex:  # pyright: ignore[reportPrivateUsage]
            outcome: _Outcome = self._cursor  # pyright: ignore[reportAssignmentType]
            connection: aiosqlite.Connection = self._connection  # pyright: ignore[reportAssignmentType]
            try:
                (description, rows, outcome.rowcount, outcome.lastrowid), in_transaction = await _on_thread(
                    connection, _execute, operation, parameters
                )
            except BaseException:
                self._adapt_connection._idle = False  # pyright: ignore[reportAttributeAccessIssue]
                raise
            self._adapt_connection._idle = not in_transaction  # pyright: ignore[reportAttributeAccessIssue]
            outcome.description = description
            if rows is not None:
                self._rows = deque(rows)
        return None

    async def _executemany_async(self, operation: Any, seq_of_parameters: Any) -> Any:
        async with self._adapt_connection._execute_mutex:  # pyright: ignore[reportPrivateUsage]
            outcome: _Outcome = self._cursor  # pyright: ignore[reportAssignmentType]
            connection: aiosqlite.Connection = self._connection  # pyright: ignore[reportAssignmentType]
            outcome.description = None
            try:
                (outcome.rowcount, outcome.lastrowid), in_transaction = await _on_thread(
                    connection, _executemany, operation, seq_of_parameters
                )
            except BaseException:
                self._adapt_connection._idle = False  # pyright: ignore[reportAttributeAccessIssue]
                raise
            self._adapt_connection._idle = not in_transaction  # pyright: ignore[reportAttributeAccessIssue]
        return None


class _OneTripConnection(AsyncAdapt_aiosqlite_connection):
    """SQLAlchemy's adapted aiosqlite connection; commit and rollback skip their trip outside a transaction.

    Every trip reports whether it left the `sqlite3` connection inside a transaction. When it did
    not (an autocommit read, a unit of work that committed on the thread), a commit or rollback,
    such as the pool's reset when the connection goes back, has nothing to do and makes no trip.
    """

    __slots__ = ("_idle",)
    _cursor_cls = _OneTripCursor

    def __init__(self, dbapi: Any, connection: Any) -> None:
        super().__init__(dbapi, connection)
        self._idle = False  # unknown until a trip says

    async def run(self, function: Callable[..., _T], *args: Any) -> _T:
        """`function(sqlite3 connection, *args)` on the connection's thread (see `run_on_thread`)."""
        driver: aiosqlite.Connection = self._connection  # pyright: ignore[reportAssignmentType]
        try:
            async with self._execute_mutex:
                result, in_transaction = await _on_thread(driver, function, *args)
        except BaseException:
            self._idle = False  # unknown: the next commit or rollback makes its trip
            raise
        self._idle = not in_transaction
        return result

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
