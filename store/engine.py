"""Database URLs, engines and the translation of driver errors into the store's errors."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Generator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry
from sqlalchemy.util import await_

from .errors import DatabaseUnavailable, StoreError, UnsupportedDatabase
from .sqlite_driver import BUSY_TIMEOUT_MS, ONE_TRIP_AIOSQLITE, run_on_thread

__all__ = (
    "ConnectionOptions",
    "check_reachable",
    "create_engine",
    "dispose",
    "normalize_url",
    "options_of",
    "own_backend",
    "reader",
    "redacted",
    "translate_errors",
)

logger = logging.getLogger(__name__)

_ASYNC_DRIVERS = {"sqlite": "aiosqlite", "postgresql": "asyncpg"}


def normalize_url(url: str | URL) -> URL:
    """The async form of a supported database URL: `sqlite://` and `postgresql://` get their async driver.

    Raises:
        UnsupportedDatabase: The URL is malformed, or names another dialect or a sync driver.
    """
    try:
        parsed = make_url(url)
    except exc.ArgumentError as error:
        raise UnsupportedDatabase(f"{redacted(url)!r} is not a database URL: {error}") from error
    backend = "postgresql" if parsed.get_backend_name() == "postgres" else parsed.get_backend_name()
    driver = _ASYNC_DRIVERS.get(backend)
    if driver is None:
        raise UnsupportedDatabase(
            f"database URL {redacted(url)!r} names the dialect {backend!r}; durable-chat supports "
            "SQLite ('sqlite+aiosqlite:///path.db') and PostgreSQL ('postgresql+asyncpg://user@host/db')"
        )
    if parsed.drivername not in {backend, f"{backend}+{driver}", "postgres"}:
        raise UnsupportedDatabase(
            f"database URL {redacted(url)!r} names the driver {parsed.drivername!r}; "
            f"use {backend}+{driver}://"
        )
    return parsed.set(drivername=f"{backend}+{driver}")


def insert_new(dialect_name: str, table: sa.Table) -> sa.Insert:
    """An INSERT that skips rows whose primary key is taken (after waiting for their writer).

    Raises:
        UnsupportedDatabase: The dialect is neither SQLite nor PostgreSQL.
    """
    keys = list(table.primary_key.columns)
    match dialect_name:
        case "postgresql":
            return postgresql.insert(table).on_conflict_do_nothing(index_elements=keys)
        case "sqlite":
            return sqlite.insert(table).on_conflict_do_nothing(index_elements=keys)
        case other:
            raise UnsupportedDatabase(f"durable-chat needs SQLite or PostgreSQL, not {other!r}")


def redacted(url: str | URL) -> str:
    """The URL with its password hidden, fit for logs and error messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except exc.ArgumentError:
        return "<unparsable URL>"


def check_reachable(url: URL) -> None:
    """Refuse a SQLite file whose folder is missing, before the driver fails on it less clearly.

    Raises:
        DatabaseUnavailable: The folder of the SQLite file does not exist.
    """
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return
    folder = Path(url.database).expanduser().absolute().parent
    if not folder.is_dir():
        raise DatabaseUnavailable(
            f"cannot open SQLite database {url.database!r}: its folder {str(folder)!r} does not exist"
        )


@dataclass(frozen=True, kw_only=True)
class ConnectionOptions:
    """How an engine's PostgreSQL connections are pooled and configured (SQLite ignores these).

    The defaults keep the library's behaviour (no timeouts, no ping); the server sets its own
    from its settings (see `docs/operations.md`).
    """

    pool_size: int = 30
    """Connections kept open per pool; an engine and its reader have a pool each."""
    max_overflow: int = 0
    """Connections opened beyond `pool_size` under load, closed when returned: each is a new
    session the next time, so none by default: a larger `pool_size` instead (the figures are in
    `docs/benchmarks.md`)."""
    pre_ping: bool = False
    """Test a pooled connection before use, so that a pool recovers from a database restart
    without failing an operation; costs a round trip (three outside autocommit) per checkout."""
    statement_timeout: float | None = None
    """Seconds after which the server cancels a statement (`statement_timeout`)."""
    lock_timeout: float | None = None
    """Seconds a statement may wait for a lock (`lock_timeout`)."""
    idle_in_transaction_timeout: float | None = None
    """Seconds a session may sit idle inside a transaction before the server ends it."""
    connect_timeout: float = 10.0
    """Seconds to wait for a new connection."""
    transaction_pooler: bool = False
    """Connections go through a transaction-mode pooler (pgbouncer): no prepared-statement
    caches, and no session settings sent at connect (set the timeouts on the role instead)."""


_options: WeakKeyDictionary[AsyncEngine, ConnectionOptions] = WeakKeyDictionary()


def create_engine(
    url: URL, *, autocommit: bool = False, options: ConnectionOptions | None = None
) -> AsyncEngine:
    """An engine configured for durable-chat's access pattern on its dialect.

    With `autocommit`, an engine for reads: its connections never open a transaction, so a read
    costs one round trip, with no BEGIN/ROLLBACK around it and no reset when it goes back to the
    pool (SQLAlchemy's DB-API `rollback()` at the end of each use is skipped too: on SQLite it is a
    trip to the driver's thread that rolls back nothing). Unless `options.pre_ping`, pooled connections are not pinged before use: a connection
    that broke is found by the operation that uses it, which fails with `DatabaseUnavailable`
    and invalidates the pool, so the next operation reconnects.
    """
    settings: dict[str, object] = {}
    if autocommit:
        settings = {
            "isolation_level": "AUTOCOMMIT",
            "pool_reset_on_return": None,
            "skip_autocommit_rollback": True,
        }
    if url.get_backend_name() == "sqlite":
        if not autocommit:
            # SQLite has one writer at a time. Writers of this process queue for the one pooled
            # connection (an asyncio wait) rather than for the file lock, whose busy handler
            # sleeps in steps of up to 100 ms; other processes still wait on the lock.
            settings = {"pool_size": 1, "max_overflow": 0, "pool_timeout": 60}
        else:
            # Readers: as many as SQLAlchemy's default allows (5 and 10 of overflow), all kept: an
            # overflow connection is closed on return and opened again (a file, pragmas, a thread).
            settings |= {"pool_size": 15, "max_overflow": 0}
        if url.get_driver_name() == "aiosqlite":
            # SQLAlchemy's aiosqlite dialect, its statements run in one trip to the driver's thread.
            settings["module"] = ONE_TRIP_AIOSQLITE
        # Not checked to one thread: the hot path runs units of work on the event loop's thread
        # (`run_here`), each connection used by one task at a time under the adapter's mutex.
        engine = create_async_engine(
            url, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000, "check_same_thread": False}, **settings
        )
        event.listen(engine.sync_engine, "connect", _configure_sqlite)
        return engine
    chosen = options or ConnectionOptions()
    engine = create_async_engine(
        url,
        pool_size=chosen.pool_size,
        max_overflow=chosen.max_overflow,
        pool_pre_ping=chosen.pre_ping,
        connect_args=_postgres_connect_args(chosen),
        **settings,
    )
    _options[engine] = chosen
    if not chosen.transaction_pooler:
        _track_backends(engine)
    return engine


_backends: WeakKeyDictionary[AsyncEngine, set[int]] = WeakKeyDictionary()


def _track_backends(engine: AsyncEngine) -> None:
    # Each pooled connection's server process id, known to asyncpg from the connection's start
    # (no query). Through a transaction-mode pooler a backend serves every client: not tracked.
    backends = _backends[engine] = set()

    def opened(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        backends.add(dbapi_connection.driver_connection.get_server_pid())

    def closed(dbapi_connection: Any, _record: object = None, *_: object) -> None:
        if dbapi_connection is not None:
            backends.discard(dbapi_connection.driver_connection.get_server_pid())

    event.listen(engine.sync_engine, "connect", opened)
    for name in ("close", "close_detached", "invalidate", "soft_invalidate"):
        event.listen(engine.sync_engine, name, closed)


def own_backend(engine: AsyncEngine, pid: int) -> bool:
    """Whether PostgreSQL backend `pid` serves one of `engine`'s pooled connections now (never through a pooler)."""
    return pid in _backends.get(engine, ())


def _postgres_connect_args(options: ConnectionOptions) -> dict[str, object]:
    arguments: dict[str, object] = {"timeout": options.connect_timeout}
    if options.transaction_pooler:
        # A transaction-mode pooler hands each transaction any server connection: a statement
        # prepared on one is unknown on the next. Startup parameters it does not track are
        # refused (or ignored), so the timeouts belong on the role there.
        arguments["statement_cache_size"] = 0
        arguments["prepared_statement_cache_size"] = 0
        return arguments
    # asyncpg expires a cached statement with a timer set as it is prepared, which keeps the context
    # of the task that prepared it, a run's, with all it holds, for the lifetime (300 s by default):
    # no lifetime, no timer. The cache stays bounded by its size, least recently used dropped first.
    arguments["max_cached_statement_lifetime"] = 0
    server_settings = {
        name: str(round(seconds * 1000))
        for name, seconds in (
            ("statement_timeout", options.statement_timeout),
            ("lock_timeout", options.lock_timeout),
            ("idle_in_transaction_session_timeout", options.idle_in_transaction_timeout),
        )
        if seconds is not None
    }
    if server_settings:
        arguments["server_settings"] = server_settings
    return arguments


def options_of(engine: AsyncEngine) -> ConnectionOptions:
    """The options `engine` was created with (the defaults for SQLite)."""
    return _options.get(engine) or ConnectionOptions()


_readers: WeakKeyDictionary[AsyncEngine, AsyncEngine] = WeakKeyDictionary()


def reader(engine: AsyncEngine) -> AsyncEngine:
    """The autocommit engine for reads that goes with `engine` (same database, its own pool)."""
    found = _readers.get(engine)
    if found is None:
        found = _readers[engine] = create_engine(engine.url, autocommit=True, options=_options.get(engine))
    return found


async def dispose(engine: AsyncEngine) -> None:
    """Close the pooled connections of `engine` and of its reader."""
    found = _readers.get(engine)
    if found is not None:
        await found.dispose()
    await engine.dispose()


def _configure_sqlite(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    await_(run_on_thread(dbapi_connection, _sqlite_pragmas))


def _sqlite_pragmas(connection: sqlite3.Connection) -> None:
    """A new SQLite connection's settings, on its own thread.

    WAL lets readers run beside the single writer; synchronous=NORMAL in WAL mode is durable
    against a crash of the process (not against a power cut of the last commit, documented).
    Foreign keys are off by default in SQLite; the schema relies on them.

    Switching a new database to WAL takes its exclusive lock, and two connections doing it at once
    (the first connections to a new file, in parallel) can be refused at once: SQLite answers
    "database is locked" without waiting, to avoid a deadlock. The switch is tried again here, on
    the connection's thread, until the busy timeout.
    """
    connection.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)
    connection.execute("PRAGMA synchronous=NORMAL")
    connection.execute("PRAGMA foreign_keys=ON")


@contextmanager
def translate_errors(what: str, *, connecting: bool = False) -> Generator[None]:
    """Turn SQLAlchemy and driver errors raised inside the block into the store's errors.

    With `connecting`, every driver error is taken for an unreachable database (a missing
    database, refused credentials), since nothing has been asked of it yet.
    """
    try:
        yield
    except StoreError:
        raise
    except exc.TimeoutError as error:
        # The pool had no free connection in time: the database is saturated, which the caller
        # should treat as unavailable (a 503 to retry), not as a fault in its request.
        raise DatabaseUnavailable(f"{what} failed: no database connection was free in time") from error
    except (exc.OperationalError, exc.InterfaceError, OSError) as error:
        raise DatabaseUnavailable(
            f"{what} failed: the database is unreachable or went away ({_cause(error)})"
        ) from error
    except exc.DBAPIError as error:
        if connecting or error.connection_invalidated:
            raise DatabaseUnavailable(f"{what} failed: the connection to the database broke") from error
        if _transient(error):
            raise DatabaseUnavailable(
                f"{what} failed: the database cannot serve it now ({_cause(error)})"
            ) from error
        raise StoreError(f"{what} failed: {_cause(error)}") from error
    except exc.SQLAlchemyError as error:
        raise StoreError(f"{what} failed: {error}") from error


# SQLSTATEs that say "not now" rather than "never": connection exceptions (08), insufficient
# resources such as too many connections (53), a server shutting down, restarting or starting up
# (57P01-57P03), a statement cancelled by `statement_timeout` (57014), a lock not granted within
# `lock_timeout` (55P03). A retry later may well succeed: 503, and a run waits and retries.
_TRANSIENT_CLASSES = ("08", "53", "57P")
_TRANSIENT_STATES = frozenset({"57014", "55P03"})


def _transient(error: exc.DBAPIError) -> bool:
    state = getattr(error.orig, "sqlstate", None) or getattr(error.orig, "pgcode", None)
    if not isinstance(state, str):
        return False
    return state.startswith(_TRANSIENT_CLASSES) or state in _TRANSIENT_STATES


def _cause(error: BaseException) -> str:
    inner = error.orig if isinstance(error, exc.DBAPIError) and error.orig is not None else error
    text = str(inner).strip().splitlines()
    return f"{type(inner).__name__}: {text[0]}" if text else type(inner).__name__
