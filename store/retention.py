"""Retention: erasing a thread with everything of it, and finding the threads idle for too long.

A thread's data lives in three places, all erased in one transaction:

- the `threads` row, whose foreign keys cascade to its runs, events, approvals, records and
  ledger rows (SQLite enforces them because every connection turns `foreign_keys` on, see
  `engine._configure_sqlite`);
- the conversation record with the thread's id (the conversation store knows no threads, so no
  foreign key ties them);
- the conversation's entries, except those a fork of it still shares: a fork is a conversation of
  its own, and keeps the history it started from.

The demo business data a tool changed (a refunded order) is not the thread's and stays.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from .erasure import erase_conversation
from .schema import (
    ConversationRecordRow,
    ReviewEventRow,
    RunRow,
    ThreadRow,
    WebhookDeliveryRow,
    active,
    metadata,
)

__all__ = ("Stale", "count_active_stale", "delegated_scope", "erase_stale", "erase_thread", "find_stale")

_threads = metadata.tables[ThreadRow.__tablename__]
_runs = metadata.tables[RunRow.__tablename__]
_records = metadata.tables[ConversationRecordRow.__tablename__]
_review_events = metadata.tables[ReviewEventRow.__tablename__]
_deliveries = metadata.tables[WebhookDeliveryRow.__tablename__]


def delegated_scope(thread_id: str) -> str:
    """The conversation scope of the sub-runs' conversations of a thread's delegated agents."""
    return f"delegated:{thread_id}"


async def erase_thread(connection: AsyncConnection, thread_id: str) -> bool:
    """Delete a thread and everything of it inside the caller's transaction; return whether it existed.

    The conversation goes first: a checkpoint writes the conversation, then the thread's rows, so
    taking the locks in the same order cannot deadlock with a run still going on.
    """
    await erase_conversation(connection, thread_id)
    subs = await connection.execute(
        sa.select(_records.c.conversation_id).where(_records.c.scope == delegated_scope(thread_id))
    )
    for (conversation_id,) in subs.all():
        await erase_conversation(connection, conversation_id)
    # Its review events hold its calls' arguments: they go, with any delivery of them still due.
    events = sa.select(_review_events.c.event_id).where(_review_events.c.thread_id == thread_id)
    await connection.execute(_deliveries.delete().where(_deliveries.c.event_id.in_(events)))
    await connection.execute(_review_events.delete().where(_review_events.c.thread_id == thread_id))
    deleted = await connection.execute(
        _threads.delete().where(_threads.c.thread_id == thread_id).returning(_threads.c.thread_id)
    )
    existed = deleted.first() is not None
    # A first checkpoint that committed between the two statements above saved the conversation
    # again. None can after this one: the thread's row is deleted (locked until the commit), and a
    # checkpoint writes to it in its own transaction, so it fails.
    await erase_conversation(connection, thread_id)
    return existed


Stale = tuple[datetime, str] | None
"""Where a purge's walk is: the activity time and id of the last thread it saw (`None`: at the start)."""


def _stale(cutoff: datetime, after: Stale, limit: int, *columns: sa.ColumnElement[Any]) -> sa.Select[Any]:
    """`columns` (the id by default) of up to `limit` threads idle since before `cutoff` with no run queued or running.

    Walked oldest first on `ix_threads_updated` (activity time, id), `after` the last one seen: the
    walk reads the stale threads only, however many threads there are.
    """
    running = sa.exists().where(_runs.c.thread_id == _threads.c.thread_id, active(_runs.c.status))
    key = (_threads.c.updated_at, _threads.c.thread_id)
    query = sa.select(*(columns or (_threads.c.thread_id,))).where(_threads.c.updated_at < cutoff, ~running)
    if after is not None:
        query = query.where(
            sa.tuple_(*key) > sa.tuple_(sa.literal(after[0], _threads.c.updated_at.type), after[1])
        )
    return query.order_by(*key).limit(limit)


async def erase_stale(
    connection: AsyncConnection, cutoff: datetime, *, after: Stale, limit: int
) -> list[RowMapping]:
    """Erase the next `limit` stale threads (see `_stale`) after `after`; return their rows.

    The activity time is checked again on the rows being deleted: a thread that took a message
    since the candidates were chosen (on PostgreSQL, the delete waits for that writer, then sees its
    update) is newer now and stays.
    """
    deleted = await connection.execute(
        _threads.delete()
        .where(_threads.c.thread_id.in_(_stale(cutoff, after, limit)), _threads.c.updated_at < cutoff)
        .returning(*_threads.c)
    )
    rows = sorted(deleted.mappings().all(), key=lambda row: (row["updated_at"], row["thread_id"]))
    for row in rows:
        # No run of these threads is going on, so no checkpoint holds their conversations' locks.
        await erase_conversation(connection, row["thread_id"])
    return rows


async def find_stale(
    connection: AsyncConnection, cutoff: datetime, *, after: Stale, limit: int
) -> list[RowMapping]:
    """The rows `erase_stale` would erase, without erasing them."""
    query = _stale(cutoff, after, limit, *_threads.c)
    return list((await connection.execute(query)).mappings().all())


async def count_active_stale(connection: AsyncConnection, cutoff: datetime) -> int:
    """How many threads idle since before `cutoff` have a run queued or running (a purge leaves them)."""
    query = (
        sa.select(sa.func.count(sa.distinct(_runs.c.thread_id)))
        .join(_threads, _threads.c.thread_id == _runs.c.thread_id)
        .where(active(_runs.c.status), _threads.c.updated_at < cutoff)
    )
    return (await connection.execute(query)).scalar_one()
