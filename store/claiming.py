"""Starting a queued run in one trip: the run's guarded UPDATE that claims it, then its thread's that reserves event ids.

For a run not claimed as it was queued: a resume after decisions, a run recovered from a dead
worker, one queued while its worker had no room. What may be claimed is `leases.claimable`'s; on
PostgreSQL both UPDATEs are one statement (the thread's reads the claimed row), which changes
nothing when the claim matches no row; on SQLite one function on the driver's thread runs both and
the commit (each in its module in `dialects/`). The run is locked before its thread, as a checkpoint locks them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine

from .compiled import Compiled, checked_out, executed, per_dialect
from .dialects import postgresql, sqlite
from .leases import Worker, claimable, skip_locked
from .schema import RunRow, ThreadRow, UtcDateTime, metadata, now_utc

__all__ = ("start_reserving",)

_runs = metadata.tables[RunRow.__tablename__]
_threads = metadata.tables[ThreadRow.__tablename__]
_RUN_COLUMNS = tuple(_runs.c.keys())


def _bind(name: str, type_: Any) -> sa.BindParameter[Any]:
    return sa.bindparam(name, type_=type_)


def _claim(dialect: Dialect) -> sa.Update:
    """The run `k_run_id` claimed for the worker `k_worker`, its row returned (none if it may not be)."""
    postgres = dialect.name == "postgresql"
    now: sa.ColumnElement[Any]
    if postgres:
        # The database's clock, as every lease (see `leases.py`).
        now = sa.func.statement_timestamp(type_=UtcDateTime())
        expires = now + sa.cast(_bind("k_lease", sa.Interval()), sa.Interval())
    else:
        now = _bind("k_now", UtcDateTime())
        expires = _bind("k_expires", UtcDateTime())
    worker = _bind("k_worker", sa.String())
    picked = skip_locked(
        sa.select(_runs.c.run_id).where(
            _runs.c.run_id == _bind("k_run_id", sa.String()), claimable(worker, now)
        ),
        dialect.name,
    )
    return (
        _runs.update()
        .where(_runs.c.run_id == picked.scalar_subquery())
        .values(
            status="running",
            started_at=_bind("k_started", UtcDateTime()),
            attempt=_runs.c.attempt + 1,
            lease_owner=worker,
            lease_expires_at=expires,
            trace_id=_bind("k_trace_id", sa.String()),
        )
        .returning(*_runs.c)
    )


def _reserve(thread_id: sa.ColumnElement[str]) -> sa.Update:
    """`k_events` ids of the thread's counter reserved; its user and newest reserved id returned."""
    return (
        _threads.update()
        .where(_threads.c.thread_id == thread_id)
        .values(last_event_id=_threads.c.last_event_id + _bind("k_events", sa.BigInteger()))
        .returning(_threads.c.user_id, _threads.c.last_event_id)
    )


@dataclass(frozen=True)
class _Statements:
    claim: Compiled
    """SQLite: the run's UPDATE. PostgreSQL: both, one statement."""
    reserve: Compiled | None


@per_dialect
def _statements(dialect: Dialect) -> _Statements:
    claim = _claim(dialect)
    if dialect.name == "postgresql":
        return _Statements(Compiled.of(postgresql.claim_statement(claim, _reserve), dialect), None)
    return _Statements(
        Compiled.of(claim, dialect), Compiled.of(_reserve(_bind("k_thread_id", sa.String())), dialect)
    )


async def start_reserving(
    engine: AsyncEngine, worker: Worker, run_id: str, *, events: int, trace_id: str | None
) -> tuple[dict[str, Any], str, int] | None:
    """Claim `run_id` for `worker` and reserve `events` event ids in one trip (see `Runs.start_reserving`).

    Returns the run's row, its thread's user and the first reserved id, or `None` (nothing written).
    """
    statements = _statements(engine.dialect)
    now = now_utc()
    values: dict[str, Any] = {
        "k_run_id": run_id,
        "k_worker": worker.worker_id,
        "k_now": now,
        "k_started": now,
        "k_expires": now + worker.lease,
        "k_lease": worker.lease,
        "k_trace_id": trace_id,
        "k_events": events,
    }
    ran: list[str] = []
    try:
        if statements.reserve is None:
            found = await checked_out(
                engine, statements.claim.sql, postgresql.claim_trip, statements.claim, values, ran
            )
        else:
            found = await checked_out(
                engine,
                statements.claim.sql,
                sqlite.claim_trip,
                statements.claim,
                statements.reserve,
                values,
                ran,
            )
    finally:
        executed(*ran)
    if found is None:
        return None
    run_row, (user_id, last_event_id) = found
    return dict(zip(_RUN_COLUMNS, run_row, strict=True)), str(user_id), int(last_event_id) - events + 1
