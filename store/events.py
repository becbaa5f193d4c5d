"""The per-thread event log: ids that increase per thread and are never reused, kept for replay.

The store knows events only as a type name and the bytes of their JSON data; `stream/` owns
their shape. Ids come from the thread's `last_event_id` counter: a run reserves a block of them
when it starts (`Runs.start_reserving`, or `EventLog.reserve` when a block runs out) and stores
its events with them (`store.checkpoints`, in a checkpoint's trip, or `EventLog.insert` on its own); a decision
appends its event with the next id (`append_events`). Ids a run leaves unused are never reused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .compaction import compact_events
from .compiled import Compiled, fetch, per_dialect
from .engine import own_backend, reader, translate_errors
from .errors import NotFound
from .event_inserts import insert_fenced
from .event_rows import NewEvent
from .notifications import EventNotice, notify_stored
from .schema import EventRow, ThreadRow, metadata, now_utc
from .tracing import traced

__all__ = ("EventLog", "LoggedEvent", "NewEvent", "append_events", "insert_reserved", "overwrite_events")

_events = metadata.tables[EventRow.__tablename__]
_threads = metadata.tables[ThreadRow.__tablename__]


@dataclass(frozen=True)
class LoggedEvent:
    """An event as stored, with its per-thread id."""

    event_id: int
    run_id: str
    type: str
    data: bytes
    created_at: datetime


_NO_LIMIT = 2**62
"""`EventLog.read`'s limit when none is given: more rows than a thread can hold."""


@per_dialect
def _read_statement(dialect: Dialect) -> Compiled:
    """`EventLog.read`'s statement."""
    query = (
        sa.select(_events.c.event_id, _events.c.run_id, _events.c.type, _events.c.data, _events.c.created_at)
        .where(
            _events.c.thread_id == sa.bindparam("thread_id", type_=sa.String()),
            _events.c.event_id > sa.bindparam("after", type_=sa.BigInteger()),
        )
        .order_by(_events.c.event_id)
        .limit(sa.bindparam("limit", type_=sa.BigInteger()))
    )
    return Compiled.of(query, dialect)


class EventLog:
    """The `events` table."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._reader = reader(engine)

    def stored_here(self, notice: EventNotice) -> bool:
        """Whether this process's own transaction (a connection of its pool) sent `notice`."""
        return notice.sender is not None and own_backend(self._engine, notice.sender)

    async def read(self, thread_id: str, *, after: int = 0, limit: int | None = None) -> list[LoggedEvent]:
        """The thread's events with an id greater than `after`, in order."""
        # Every stream that opens or catches up reads here: a statement compiled once, on the driver.
        compiled = _read_statement(self._reader.dialect)
        values = {"thread_id": thread_id, "after": after, "limit": _NO_LIMIT if limit is None else limit}
        with translate_errors(f"reading the events of thread {thread_id!r}"):
            rows = await fetch(self._reader, compiled, values)
        return [LoggedEvent(row[0], row[1], row[2], row[3], row[4]) for row in rows]

    @traced("reserve_events")
    async def reserve(self, thread_id: str, count: int) -> int:
        """Reserve `count` consecutive ids for a writer of the thread; return the first.

        The ids are the writer's to use in order (`insert`); those it leaves unused are never
        handed out again. A run reserves a block once instead of advancing the counter per write.

        Raises:
            NotFound: The thread does not exist.
        """
        with translate_errors(f"reserving event ids of thread {thread_id!r}"):
            async with self._engine.begin() as connection:
                last = (
                    await connection.execute(
                        _threads.update()
                        .where(_threads.c.thread_id == thread_id)
                        .values(last_event_id=_threads.c.last_event_id + count)
                        .returning(_threads.c.last_event_id)
                    )
                ).scalar_one_or_none()
        if last is None:
            raise NotFound(f"no thread {thread_id!r}")
        return last - count + 1

    async def compact(self, finished_before: datetime, *, limit: int = 200) -> tuple[int, int]:
        """Drop the text deltas of up to `limit` runs finished before `finished_before`; return how
        many runs and events (`store.compaction`)."""
        return await compact_events(self._engine, finished_before, limit=limit)

    async def of_run(self, thread_id: str, run_id: str, *, types: Sequence[str]) -> list[LoggedEvent]:
        """The events of `types` that the run `run_id` stored in the thread's log, in order."""
        query = (
            sa.select(
                _events.c.event_id, _events.c.run_id, _events.c.type, _events.c.data, _events.c.created_at
            )
            .where(_events.c.thread_id == thread_id, _events.c.run_id == run_id, _events.c.type.in_(types))
            .order_by(_events.c.event_id)
        )
        with translate_errors(f"reading the events of run {run_id!r}"):
            async with self._reader.connect() as connection:
                rows = (await connection.execute(query)).all()
        return [LoggedEvent(row[0], row[1], row[2], row[3], row[4]) for row in rows]

    async def of_types(self, thread_id: str, types: Sequence[str]) -> list[LoggedEvent]:
        """The events of `types` in the thread's log, in order."""
        query = (
            sa.select(
                _events.c.event_id, _events.c.run_id, _events.c.type, _events.c.data, _events.c.created_at
            )
            .where(_events.c.thread_id == thread_id, _events.c.type.in_(types))
            .order_by(_events.c.event_id)
        )
        with translate_errors(f"reading the events of thread {thread_id!r}"):
            async with self._reader.connect() as connection:
                rows = (await connection.execute(query)).all()
        return [LoggedEvent(row[0], row[1], row[2], row[3], row[4]) for row in rows]

    @traced("append_events")
    async def insert(
        self,
        thread_id: str,
        events: Sequence[tuple[int, NewEvent]],
        *,
        run_id: str | None = None,
        worker_id: str | None = None,
        quiet: bool = False,
    ) -> None:
        """Store events whose ids were reserved, in one transaction.

        With `run_id` and `worker_id`, only while that worker holds that run's lease: a worker
        whose run was taken over stores nothing. `quiet`: the caller's process drives few runs, so
        on SQLite the transaction runs on the event loop's thread, its quickest; otherwise on the
        connection's thread, whose longer trip on a busy loop lets a writer group more events
        into its next transaction (`store.event_inserts`).

        Raises:
            LeaseLost: `worker_id` no longer holds `run_id`; nothing was stored.
            NotFound: There is no run `run_id`; nothing was stored.
        """
        with translate_errors(f"appending events to thread {thread_id!r}"):
            # One trip, on statements compiled once (`event_inserts.py`).
            await insert_fenced(
                self._engine, thread_id, events, run_id=run_id, worker_id=worker_id, quiet=quiet
            )

    async def before_run(self, thread_id: str, run_id: str) -> int:
        """An id below every event of the run `run_id`, stored or still to come, and as high as that allows.

        The id before the run's first stored event; with none stored yet, the thread's newest
        stored id (a run's ids are reserved when it starts, above every id handed out before).
        Both come from one statement, so a run storing its first events meanwhile cannot slip
        between them.
        """
        first = sa.func.min(sa.case((_events.c.run_id == run_id, _events.c.event_id)))
        query = sa.select(first, sa.func.max(_events.c.event_id)).where(_events.c.thread_id == thread_id)
        with translate_errors(f"reading the events of thread {thread_id!r}"):
            async with self._reader.connect() as connection:
                row = (await connection.execute(query)).one()
        first_id, newest = row
        if first_id is not None:
            return int(first_id) - 1
        return int(newest or 0)

    async def newest(self, thread_id: str) -> int:
        """The id of the thread's newest stored event, 0 when it has none."""
        with translate_errors(f"reading the events of thread {thread_id!r}"):
            async with self._reader.connect() as connection:
                value = (
                    await connection.execute(
                        sa.select(sa.func.max(_events.c.event_id)).where(_events.c.thread_id == thread_id)
                    )
                ).scalar_one_or_none()
        return value or 0


async def append_events(
    connection: AsyncConnection, thread_id: str, events: Sequence[NewEvent]
) -> list[LoggedEvent]:
    """Append `events` inside the caller's unit of work.

    Raises:
        NotFound: The thread does not exist (deleted meanwhile).
    """
    if not events:
        return []
    now = now_utc()
    last = (
        await connection.execute(
            _threads.update()
            .where(_threads.c.thread_id == thread_id)
            .values(last_event_id=_threads.c.last_event_id + len(events), updated_at=now)
            .returning(_threads.c.last_event_id)
        )
    ).scalar_one_or_none()
    if last is None:
        raise NotFound(f"no thread {thread_id!r}")
    first = last - len(events) + 1
    logged = [
        LoggedEvent(first + offset, event.run_id, event.type, event.data, now)
        for offset, event in enumerate(events)
    ]
    await insert_reserved(connection, thread_id, list(enumerate(events, start=first)), now=now)
    return logged


async def insert_reserved(
    connection: AsyncConnection,
    thread_id: str,
    events: Sequence[tuple[int, NewEvent]],
    *,
    now: datetime | None = None,
) -> None:
    """Store `events` (`(event_id, NewEvent)`), whose ids were reserved, inside the caller's unit of
    work, created at `now` (by default, the time of this call), and tell the thread's followers."""
    if not events:
        return
    created = now or now_utc()
    await connection.execute(
        _events.insert(),
        [
            {
                "thread_id": thread_id,
                "event_id": event_id,
                "run_id": event.run_id,
                "type": event.type,
                "data": event.data,
                "created_at": created,
            }
            for event_id, event in events
        ],
    )
    await notify_stored(connection, thread_id, max(event_id for event_id, _ in events))


async def overwrite_events(
    connection: AsyncConnection, thread_id: str, event_ids: Sequence[int], data: bytes
) -> None:
    """Replace the data of stored events inside the caller's unit of work; their ids and types stay.

    An output guardrail uses it to blank the text deltas it withdrew, so a replay never shows them.
    """
    if not event_ids:
        return
    await connection.execute(
        _events.update()
        .where(_events.c.thread_id == thread_id, _events.c.event_id.in_(list(event_ids)))
        .values(data=data)
    )
