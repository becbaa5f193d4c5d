"""Queueing a run in two statements: the thread's UPDATE that reads what refuses one, then its INSERT.

`store.runs` queues with these. The UPDATE comes first and serializes the thread's writers (its
row lock on PostgreSQL, the write lock on SQLite); its RETURNING reads, in the same trip, what may
refuse the run (a run of the same idempotency key, an active run, pending approvals) and, for a
rate limit, the user's recent messages. The INSERT may create the run claimed by a worker and
started, so that the worker needs no transaction of its own to claim it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from .leases import Worker, clock
from .schema import ACTIVE_RUN_STATUSES, ApprovalRow, RunKind, RunRow, ThreadRow, metadata, now_utc
from .threads import touched

__all__ = ("Refusals", "insert_queued", "refuse_or_mark")

_runs = metadata.tables[RunRow.__tablename__]
_approvals = metadata.tables[ApprovalRow.__tablename__]
_threads = metadata.tables[ThreadRow.__tablename__]


@dataclass(frozen=True)
class Refusals:
    """What `refuse_or_mark` read of a thread: its user, its event counter, and what may refuse a run."""

    user_id: str
    last_event_id: int
    keyed: str | None
    active: bool
    pending: bool
    sent: int | None


async def refuse_or_mark(
    connection: AsyncConnection,
    thread_id: str,
    kind: RunKind,
    content: str,
    idempotency_key: str | None,
    claim_events: int | None,
    count_since: datetime | None,
) -> Refusals | None:
    """Mark the thread running (reserving `claim_events` ids), and read what may refuse the run, in one statement.

    `None` when there is no such thread.
    """
    threads = _threads.c
    values = touched(status="running", message=content if kind == "message" else None)
    if claim_events is not None:
        values["last_event_id"] = threads.last_event_id + claim_events
    # SQLAlchemy renders RETURNING's columns unqualified, which a subquery would take for its own
    # table's: the updated row is named in full, and the subqueries' tables get aliases.
    this_thread = sa.literal_column("threads.thread_id", sa.String())
    runs = _runs.alias("other_runs")
    keyed: sa.ColumnElement[Any] = sa.null()
    if idempotency_key is not None:
        keyed = (
            sa.select(runs.c.run_id)
            .where(runs.c.thread_id == this_thread, runs.c.idempotency_key == idempotency_key)
            .scalar_subquery()
        )
    active = sa.exists().where(runs.c.thread_id == this_thread, runs.c.status.in_(ACTIVE_RUN_STATUSES))
    approvals = _approvals.alias("pending_approvals")
    pending = sa.exists().where(approvals.c.thread_id == this_thread, approvals.c.status == "pending")
    sent: sa.ColumnElement[Any] = sa.null()
    if count_since is not None:
        owners = _threads.alias("owners")
        theirs = sa.select(owners.c.thread_id).where(
            owners.c.user_id == sa.literal_column("threads.user_id", sa.String())
        )
        sent = (
            sa.select(sa.func.count())
            .select_from(runs)
            .where(runs.c.thread_id.in_(theirs), runs.c.kind == "message", runs.c.created_at >= count_since)
            .scalar_subquery()
        )
    row = (
        await connection.execute(
            _threads.update()
            .where(threads.thread_id == thread_id)
            .values(**values)
            .returning(
                threads.user_id,
                threads.last_event_id,
                keyed,
                active,
                pending,
                sent,
            )
        )
    ).one_or_none()
    if row is None:
        return None
    user_id, last_event_id, keyed_id, has_active, has_pending, sent_count = cast("tuple[Any, ...]", row)
    return Refusals(
        user_id=str(user_id),
        last_event_id=int(last_event_id),
        keyed=None if keyed_id is None else str(keyed_id),
        active=bool(has_active),
        pending=bool(has_pending),
        sent=None if sent_count is None else int(sent_count),
    )


async def insert_queued(
    connection: AsyncConnection,
    thread_id: str,
    kind: RunKind,
    content: str,
    idempotency_key: str | None,
    worker: Worker | None,
) -> RowMapping:
    """Insert a queued run, or one `worker` holds and started; return its row."""
    now = now_utc()
    values: dict[str, object] = {
        "run_id": str(uuid.uuid4()),
        "thread_id": thread_id,
        "kind": kind,
        "status": "queued",
        "content": content,
        "idempotency_key": idempotency_key,
        "attempt": 0,
        "checkpoints": 0,
        "created_at": now,
    }
    if worker is not None:
        values.update(
            status="running",
            attempt=1,
            started_at=now,
            lease_owner=worker.worker_id,
            lease_expires_at=clock(connection.dialect.name, worker.lease),
        )
    result = await connection.execute(_runs.insert().values(**values).returning(*_runs.c))
    return result.mappings().one()
