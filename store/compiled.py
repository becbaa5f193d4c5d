"""Statements compiled once per dialect, run on the driver's own connection, errors as SQLAlchemy's.

SQLAlchemy Core costs far more a statement on a cache hit (the statement rebuilt, its cache key,
an execution context, the greenlet bridge) than SQLite takes to run one (figures in
`docs/benchmarks.md`, "Figures behind the code's choices"). The hot path of the conversation store (a load, a save) compiles its statements once with SQLAlchemy,
keeping the schema's types (their bind and result processors), and runs the SQL on the driver
connection SQLAlchemy's pool hands out: on SQLite as one function on aiosqlite's thread, on
PostgreSQL through asyncpg, whose own cache prepares each statement once per connection.

Engines, pools, transactions and error translation stay SQLAlchemy's: `driver_errors` turns a
driver's exception into the `sqlalchemy.exc` error SQLAlchemy would have raised (invalidating the
connection when it broke), for `engine.translate_errors` to turn into the store's errors.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Concatenate, NoReturn, ParamSpec, TypeVar

import sqlalchemy as sa
from pydantic_ai.exceptions import UserError
from sqlalchemy import exc
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.util import await_, greenlet_spawn

from .errors import StoreError
from .sqlite_driver import run_here

__all__ = (
    "COMMIT",
    "Compiled",
    "begun",
    "checked_out",
    "driver_errors",
    "executed",
    "fetch",
    "first_then_second",
    "observing",
    "per_dialect",
    "write",
)

COMMIT = "COMMIT"
"""Given to `executed` after the statements (of the same task) that committed on the driver.

Observers with an `on_commit` callback are told of it; on PostgreSQL a statement outside a
transaction commits alone, and is followed by `COMMIT` too.
"""

_observers: list[tuple[Callable[[str], None], Callable[[], None] | None]] = []


@contextmanager
def observing(
    callback: Callable[[str], None], *, on_commit: Callable[[], None] | None = None
) -> Generator[None]:
    """Call `callback` with the SQL of each statement the hot path runs on a driver, inside the block.

    The counterpart of SQLAlchemy's `before_cursor_execute` event for statements that bypass
    SQLAlchemy's execution, and `on_commit` of its `commit` event for a commit on the driver: for
    tests and benchmarks that count statements.
    """
    observer = (callback, on_commit)
    _observers.append(observer)
    try:
        yield
    finally:
        _observers.remove(observer)


def executed(*statements: str) -> None:
    """Tell the observers these statements ran (`COMMIT`: the ones before it committed)."""
    for callback, on_commit in _observers:
        for statement in statements:
            if statement != COMMIT:
                callback(statement)
            elif on_commit is not None:
                on_commit()


_P = ParamSpec("_P")
_T = TypeVar("_T")


def per_dialect(build: Callable[Concatenate[Dialect, _P], _T]) -> Callable[Concatenate[Dialect, _P], _T]:
    """`build(dialect, *key)` run once per dialect name and driver (and `key`), its result kept.

    Every engine has a dialect instance of its own and they all compile the same SQL: a cache keyed
    by the instance (`functools.cache`) would compile it again for each engine and keep every
    engine's dialect alive.
    """
    built: dict[tuple[object, ...], _T] = {}

    @functools.wraps(build)
    def once(dialect: Dialect, *key: _P.args, **named: _P.kwargs) -> _T:
        index = (dialect.name, dialect.driver, *key, *sorted(named.items()))
        found = built.get(index)
        if found is None:
            found = built[index] = build(dialect, *key, **named)
        return found

    return once


_Processor = Callable[[Any], Any] | None


@dataclass(frozen=True, slots=True)
class Compiled:
    """One statement's SQL for a dialect, its positional parameters and its columns' processors."""

    sql: str
    names: tuple[str, ...]
    binds: tuple[_Processor, ...]
    defaults: Mapping[str, Any]
    results: tuple[_Processor, ...]

    @classmethod
    def of(cls, statement: sa.ClauseElement, dialect: Dialect) -> Compiled:
        """Compile `statement` for `dialect` (positional parameters: `?` on SQLite, `$n` on asyncpg)."""
        compiled = statement.compile(dialect=dialect)
        if not isinstance(compiled, SQLCompiler) or not compiled.positional or compiled.positiontup is None:
            raise TypeError(f"the {dialect.name} dialect does not use positional parameters")
        names = tuple(compiled.positiontup)
        binds = tuple(
            compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect) for name in names
        )
        columns: Sequence[Any] = getattr(statement, "selected_columns", None) or [
            column for column in getattr(statement, "_returning", ())
        ]
        results = tuple(
            column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns
        )
        # The values of the statement's own literals (a depth's start, say); the rest are given.
        defaults = {name: bind.value for name, bind in compiled.binds.items() if not bind.required}
        return cls(compiled.string, names, binds, defaults, results)

    def parameters(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """The positional parameters for `values` (by bind name), through the columns' bind processors."""
        defaults = self.defaults
        return tuple(
            (value if process is None or value is None else process(value))
            for name, process in zip(self.names, self.binds, strict=True)
            for value in (values[name] if name in values else defaults[name],)
        )

    def index(self, name: str) -> int:
        """Where the parameter `name` goes in the positional parameters (its first use)."""
        return self.names.index(name)

    def row(self, raw: Sequence[Any]) -> tuple[Any, ...]:
        """A result row through the columns' result processors."""
        return tuple(
            value if process is None or value is None else process(value)
            for value, process in zip(raw, self.results, strict=True)
        )

    def rows(self, raw: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        """Each of `raw` as `row` gives it, at about two thirds of the cost per row.

        Only the columns with a processor are visited (a history's message bytes have none); a
        history of a thousand entries is a thousand rows.
        """
        processed = [(index, process) for index, process in enumerate(self.results) if process is not None]
        width = len(self.results)
        converted: list[tuple[Any, ...]] = []
        for row in raw:
            if len(row) != width:
                raise ValueError(f"a row of {len(row)} columns for a statement of {width}")
            values = list(row)
            for index, process in processed:
                value = values[index]
                if value is not None:
                    values[index] = process(value)
            converted.append(tuple(values))
        return converted


@asynccontextmanager
async def driver_errors(connection: AsyncConnection, statement: str) -> AsyncGenerator[Any]:
    """The pooled connection under `connection` (`.driver_connection`, `.dbapi_connection`); its
    errors inside the block raised as SQLAlchemy's.

    A DB-API error becomes the `sqlalchemy.exc.DBAPIError` subclass SQLAlchemy raises for it, and a
    disconnect invalidates the connection, as a statement run through SQLAlchemy would.
    """
    fairy = await connection.get_raw_connection()
    try:
        yield fairy
    except (exc.SQLAlchemyError, StoreError, UserError):
        raise  # already translated, or the store's own outcome (a conflict)
    except Exception as error:
        await _raise_translated(
            connection.invalidate, connection.dialect, fairy.dbapi_connection, error, statement
        )


async def begun(pooled: Any) -> None:
    """Begin the transaction of a connection SQLAlchemy holds inside one (`driver_errors`) unless it has.

    PostgreSQL's adapter sends BEGIN with the transaction's first statement through it; a statement
    sent on the driver itself must begin it first (a trip). SQLite's driver begins on its own.
    """
    adapted = pooled.dbapi_connection
    if getattr(adapted, "_transaction", False) is None:
        # A cancellation must not cut BEGIN short: the adapter would not know the transaction the
        # server opened, nor roll it back, and the pool would hand out a connection inside it (asyncpg
        # nests the next one in it as a savepoint), whose next writes never commit. The BEGIN
        # finishes, then the cancellation goes on; a BEGIN that did not finish leaves the
        # connection's state unknown, and it never goes back to the pool.
        starting = asyncio.ensure_future(adapted._start_transaction())
        try:
            await asyncio.shield(starting)
        except BaseException:
            try:
                if not starting.done():
                    await asyncio.wait([starting])
            finally:
                if not starting.done() or starting.cancelled() or starting.exception() is not None:
                    pooled.invalidate()
            raise


async def checked_out(
    engine: AsyncEngine,
    statement: str,
    work: Callable[Concatenate[Any, _P], Awaitable[_T]],
    *args: _P.args,
    **named: _P.kwargs,
) -> _T:
    """`await work(pooled, *args)` on a connection from `engine`'s pool, without SQLAlchemy's
    `Connection` around it; errors as in `driver_errors`.

    For a unit of work that ends itself (an autocommit read, a write that commits in its trip): a
    third of the cost of `engine.connect()`. Going back to the pool resets the connection as usual,
    which costs no trip when it is not inside a transaction. SQLAlchemy's pool is synchronous code
    that awaits the driver from inside a greenlet: the checkout, the work (awaited from inside that
    greenlet) and the return run in one greenlet, less CPU than one to take the connection and
    another to give it back.
    """
    return await greenlet_spawn(_checked_out, engine, statement, work, *args, **named)


def _checked_out(
    engine: AsyncEngine,
    statement: str,
    work: Callable[Concatenate[Any, _P], Awaitable[_T]],
    *args: _P.args,
    **named: _P.kwargs,
) -> _T:
    dialect = engine.dialect
    try:
        fairy = engine.sync_engine.raw_connection()
    except dialect.loaded_dbapi.Error as error:
        # Unlike `engine.connect()`, the pool raises the driver's error as it is: wrap it as that does.
        raise exc.DBAPIError.instance(
            None, None, error, dialect.loaded_dbapi.Error, connection_invalidated=True, dialect=dialect
        ) from error
    try:
        return await_(work(fairy, *args, **named))
    except (exc.SQLAlchemyError, StoreError, UserError):
        raise
    except Exception as error:
        found = _translated(dialect, fairy.dbapi_connection, error, statement)
        if found is None:
            raise
        translated, dbapi_error, invalidated = found
        if invalidated:
            fairy.invalidate(dbapi_error)
        raise translated from error
    finally:
        fairy.close()


def _translated(
    dialect: Dialect, adapted: Any, error: Exception, statement: str
) -> tuple[BaseException, Exception, bool] | None:
    """What SQLAlchemy raises for the driver's `error`, the DB-API error, and whether it was a
    disconnect (the caller invalidates the connection); `None` when `error` is not the driver's.
    """
    dbapi_error_class: type[Exception] = dialect.loaded_dbapi.Error
    dbapi_error: Exception = error
    if not isinstance(error, dbapi_error_class):
        # The asyncpg adapter's own translation of asyncpg's exceptions to DB-API classes.
        try:
            adapted._handle_exception(error)
        except Exception as translated:
            dbapi_error = translated
    if not isinstance(dbapi_error, dbapi_error_class):
        return None
    invalidated = dialect.is_disconnect(dbapi_error, adapted, None)
    translated = exc.DBAPIError.instance(
        statement, None, dbapi_error, dbapi_error_class, connection_invalidated=invalidated, dialect=dialect
    )
    return translated, dbapi_error, invalidated


async def _raise_translated(
    invalidate: Callable[[BaseException], Awaitable[None]],
    dialect: Dialect,
    adapted: Any,
    error: Exception,
    statement: str,
) -> NoReturn:
    found = _translated(dialect, adapted, error, statement)
    if found is None:
        raise error
    translated, dbapi_error, invalidated = found
    if invalidated:
        await invalidate(dbapi_error)
    raise translated from error


def first_then_second(
    connection: sqlite3.Connection,
    first_sql: str,
    first_parameters: Sequence[Any],
    second_sql: str,
    second_parameters: Callable[[Any], Sequence[Any] | None],
    ran: list[str],
    then: tuple[str, Callable[[Any], Sequence[Sequence[Any]]]] | None = None,
) -> tuple[Any, Any]:
    """SQLite, as one unit of work (`run_here`): a transaction of two statements, each returning one row.

    The first runs; `second_parameters(its row)` says what the second runs with, or `None` to stop
    there (never called without a row). The second's row is read and the transaction committed; a
    stop or an error rolls it back. `then`: a statement and a function of the first's row giving
    its rows, run (`executemany`) after the second, in the same transaction. Returns the first's
    row (`None` if it had none) and the second's (`None` if it did not run). `ran` collects the
    statements for `executed`.
    """
    try:
        ran.append(first_sql)
        rows = connection.execute(first_sql, first_parameters).fetchall()
        first = rows[0] if rows else None
        parameters = None if first is None else second_parameters(first)
        if parameters is None:
            if connection.in_transaction:
                connection.rollback()
            return first, None
        ran.append(second_sql)
        [second] = connection.execute(second_sql, parameters).fetchall()
        if then is not None and (more := then[1](first)):
            ran.append(then[0])
            connection.executemany(then[0], more)
        connection.commit()
        ran.append(COMMIT)
        return first, second
    except BaseException:
        if connection.in_transaction:
            connection.rollback()
        raise


def _fetch_all(connection: sqlite3.Connection, sql: str, parameters: Sequence[Any]) -> list[Any]:
    return connection.execute(sql, parameters).fetchall()


async def _fetch_on(pooled: Any, dialect_name: str, sql: str, parameters: Sequence[Any]) -> list[Any]:
    if dialect_name == "sqlite":
        return await run_here(pooled.dbapi_connection, _fetch_all, sql, parameters)
    return await pooled.driver_connection.fetch(sql, *parameters)


async def fetch(engine: AsyncEngine, compiled: Compiled, values: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """The rows of a read (on an autocommit engine) in one trip on the driver, through the columns' result processors.

    Errors as in `driver_errors`: SQLAlchemy's, for `engine.translate_errors`.
    """
    raw = await checked_out(
        engine, compiled.sql, _fetch_on, engine.dialect.name, compiled.sql, compiled.parameters(values)
    )
    executed(compiled.sql)
    return compiled.rows(raw)


def _write_committed(connection: sqlite3.Connection, sql: str, parameters: Sequence[Any]) -> None:
    try:
        connection.execute(sql, parameters)
        connection.commit()
    except BaseException:
        if connection.in_transaction:
            connection.rollback()
        raise


async def _write_on(pooled: Any, dialect_name: str, sql: str, parameters: Sequence[Any]) -> None:
    if dialect_name == "sqlite":
        await run_here(pooled.dbapi_connection, _write_committed, sql, parameters)
    else:
        await pooled.driver_connection.execute(sql, *parameters)  # alone: its own transaction


async def write(engine: AsyncEngine, compiled: Compiled, values: Mapping[str, Any]) -> None:
    """One statement as its own transaction, in one trip on the driver (on SQLite, a unit of work
    on the loop's thread: `run_here`).

    Errors as in `driver_errors`: SQLAlchemy's, for `engine.translate_errors`.
    """
    await checked_out(
        engine, compiled.sql, _write_on, engine.dialect.name, compiled.sql, compiled.parameters(values)
    )
    executed(compiled.sql, COMMIT)
