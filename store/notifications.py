"""Cross-process doorbells for the event log: PostgreSQL `NOTIFY` when events are stored, `LISTEN` for them.

Several server processes share one PostgreSQL database; a follower of a thread may be connected
to a process other than the one running the thread's run. Deliberate choices:

- **One notification per storing transaction**, not per event: `notify_stored` runs inside the
  transaction that stores a thread's events, so it is delivered only if they commit, and only
  once they are visible. Its payload is tiny, `"<thread_id> <newest event id>"`: the listener
  reads the events themselves from the log (a payload is capped at 8000 bytes, and the log is
  the source of truth anyway).
- **One dedicated connection per process** listens (`EventListener`), outside the pools: a
  `LISTEN` belongs to a session, so it needs a direct connection, not a transaction-mode pooler.
- **Notifications sent while the listener is disconnected are lost.** It reconnects with
  backoff and then calls `on_connected`, whose job is to catch up from the log. It also pings
  the connection now and then, since a silent network failure would otherwise go unnoticed.
- SQLite is one process's database: nothing is sent and nothing listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol, cast

import asyncpg  # pyright: ignore[reportMissingTypeStubs]
import sqlalchemy as sa
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection

from .engine import redacted

__all__ = ("EVENTS_CHANNEL", "EventListener", "EventNotice", "notify_stored", "parse_notice")

logger = logging.getLogger(__name__)

EVENTS_CHANNEL = "durable_chat_events"
"""The channel every process's storing transactions notify and every listener listens on."""

# SQLAlchemy's own options in a URL's query, which asyncpg would take for server settings.
_SQLALCHEMY_QUERY_KEYS = ("prepared_statement_cache_size", "prepared_statement_name_func")


@dataclass(frozen=True)
class EventNotice:
    """Events of `thread_id` up to `event_id` are stored."""

    thread_id: str
    event_id: int
    sender: int | None = None
    """The PostgreSQL backend (server process id) whose transaction stored them, when known."""


async def notify_stored(connection: AsyncConnection, thread_id: str, newest: int) -> None:
    """Announce, when the caller's transaction commits, that `thread_id` has events up to `newest`."""
    if connection.dialect.name != "postgresql":
        return
    await connection.execute(sa.select(sa.func.pg_notify(EVENTS_CHANNEL, f"{thread_id} {newest}")))


def parse_notice(payload: str) -> EventNotice | None:
    """The notice a payload carries, or `None` for one this version does not understand."""
    thread_id, _, newest = payload.rpartition(" ")
    if not thread_id or not (newest.isascii() and newest.isdigit()):
        return None
    return EventNotice(thread_id, int(newest))


class _Connection(Protocol):
    """What the listener uses of an `asyncpg.Connection` (asyncpg ships no type information)."""

    def add_termination_listener(self, callback: Callable[[object], None]) -> None: ...
    async def add_listener(
        self, channel: str, callback: Callable[[object, int, str, object], None]
    ) -> None: ...
    async def execute(self, query: str) -> str: ...
    def terminate(self) -> None: ...


async def _connect(dsn: str, seconds: float) -> _Connection:
    # The cast (and the ignore) because asyncpg ships no type information; `_Connection` says
    # what this module relies on.
    opened = await asyncpg.connect(dsn, timeout=seconds)  # pyright: ignore[reportUnknownMemberType, reportArgumentType, reportUnknownVariableType]
    return cast("_Connection", opened)


NoticeHandler = Callable[[EventNotice], None]
ConnectedHandler = Callable[[], None]


class EventListener:
    """One process's `LISTEN` connection, kept open for its life; see the module's notes."""

    def __init__(
        self,
        url: URL,
        *,
        on_notice: NoticeHandler,
        on_connected: ConnectedHandler,
        ping_seconds: float = 10.0,
        connect_timeout: float = 10.0,
        max_backoff: float = 5.0,
    ) -> None:
        self._dsn = _asyncpg_dsn(url)
        self._shown = redacted(url)
        self._on_notice = on_notice
        self._on_connected = on_connected
        self._ping_seconds = ping_seconds
        self._connect_timeout = connect_timeout
        self._max_backoff = max_backoff
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self.connections = 0
        """How many times the listener connected; more than one means it reconnected."""

    def start(self) -> None:
        """Connect and listen in the background, until `aclose`."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="event-listener")

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def wait_connected(self) -> None:
        """Wait until the listener is connected and listening."""
        await self._connected.wait()

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        backoff = 0.0
        while True:
            if backoff:
                await asyncio.sleep(backoff)
            # Any error, not only the driver's: the listener must outlive whatever happens to it.
            try:
                connection = await _connect(self._dsn, self._connect_timeout)
            except Exception as error:
                backoff = min(max(backoff * 2, 0.1), self._max_backoff)
                logger.warning("cannot listen for events on %s (%s); retrying", self._shown, _name(error))
                continue
            try:
                await self._listen(connection)
                backoff = 0.0  # it had worked: the first retry is immediate
            except Exception as error:
                backoff = min(max(backoff * 2, 0.1), self._max_backoff)
                logger.warning("lost the event listener connection (%s); reconnecting", _name(error))
            finally:
                self._connected.clear()
                connection.terminate()

    async def _listen(self, connection: _Connection) -> None:
        lost = asyncio.Event()
        connection.add_termination_listener(lambda _connection: lost.set())
        await connection.add_listener(EVENTS_CHANNEL, self._received)
        self.connections += 1
        if self.connections > 1:
            logger.warning("event listener reconnected (%d connections so far)", self.connections)
        self._connected.set()
        # After the LISTEN: whatever was stored before it (while disconnected) is caught up from
        # the log, and whatever is stored after it is notified. Both may hold an event; the
        # broker drops the second copy.
        try:
            self._on_connected()
        except Exception:
            logger.exception("catching up after the event listener connected failed")
        while True:
            try:
                await asyncio.wait_for(lost.wait(), timeout=self._ping_seconds)
            except TimeoutError:
                # Quiet for a while: make sure the connection is still there.
                await asyncio.wait_for(connection.execute("SELECT 1"), timeout=self._ping_seconds)
            else:
                break
        logger.warning("the event listener connection closed; reconnecting")

    def _received(self, _connection: object, pid: int, _channel: str, payload: object) -> None:
        notice = parse_notice(payload) if isinstance(payload, str) else None
        if notice is None:
            logger.warning("ignored a malformed event notification")
            return
        notice = replace(notice, sender=pid)
        try:
            self._on_notice(notice)
        except Exception:
            # A callback of asyncpg's: an error here would be lost, and must not stop listening.
            logger.exception("handling an event notification failed")


def _asyncpg_dsn(url: URL) -> str:
    query = {key: value for key, value in url.query.items() if key not in _SQLALCHEMY_QUERY_KEYS}
    return url.set(drivername="postgresql", query=query).render_as_string(hide_password=False)


def _name(error: BaseException) -> str:
    return type(error).__name__
