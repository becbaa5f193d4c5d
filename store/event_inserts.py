"""The event log's writer: a thread's events stored in one trip, fenced by the run's lease.

Each database's statements and trip are in `dialects/`. The design note is "The event log's
write is one trip too" in `docs/store.md`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine

from .compiled import Compiled, checked_out, executed, per_dialect
from .dialects import postgresql, sqlite
from .errors import LeaseLost, NotFound
from .event_rows import HELD, event_values

__all__ = ("insert_fenced",)


@dataclass(frozen=True)
class _Statements:
    insert: Compiled
    """SQLite: one event. PostgreSQL: the events, unfenced."""
    fenced: Compiled
    """SQLite: the run's owner. PostgreSQL: the events, fenced."""


@per_dialect
def _statements(dialect: Dialect) -> _Statements:
    if dialect.name == "postgresql":
        return _Statements(
            Compiled.of(postgresql.events_statement(fenced=False), dialect),
            Compiled.of(postgresql.events_statement(fenced=True), dialect),
        )
    return _Statements(Compiled.of(sqlite.event_insert(), dialect), Compiled.of(HELD, dialect))


async def insert_fenced(
    engine: AsyncEngine,
    thread_id: str,
    events: Sequence[tuple[int, Any]],
    *,
    run_id: str | None,
    worker_id: str | None,
    quiet: bool = False,
) -> None:
    """Store `events` (`(event_id, NewEvent)`) in their own transaction, in one trip; with `run_id` and
    `worker_id`, only while that worker holds that run. `quiet`: as `EventLog.insert` takes it.

    Raises:
        LeaseLost: `worker_id` no longer holds `run_id`; nothing was stored.
        NotFound: No run `run_id`; nothing was stored.
    """
    statements = _statements(engine.dialect)
    fenced = run_id is not None and worker_id is not None
    postgres = engine.dialect.name == "postgresql"
    values = event_values(thread_id, events, postgres=postgres) | {
        "h_run_id": run_id,
        "h_worker_id": worker_id,
    }
    ran: list[str] = []
    statement = statements.fenced if postgres and fenced else statements.insert
    try:
        if postgres:
            refusal = await checked_out(
                engine, statement.sql, postgresql.insert_events, statement, values, ran
            )
        else:
            rows = sqlite.event_rows(statements.insert, values, events)
            held = (statements.fenced.sql, statements.fenced.parameters(values)) if fenced else None
            refusal = await checked_out(
                engine,
                statement.sql,
                sqlite.insert_events,
                statements.insert.sql,
                rows,
                held,
                worker_id,
                ran,
                quiet,
            )
    finally:
        executed(*ran)
    if refusal == "no run":
        raise NotFound(f"no run {run_id!r}")
    if refusal is not None:
        raise LeaseLost(f"run {run_id!r} is no longer held by worker {worker_id!r}")
