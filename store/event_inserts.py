"""Storing a thread's events on compiled statements: the event log's writer in one trip, a checkpoint's share.

The design note is "The event log's write is one trip too" in `docs/store.md`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine

from .compiled import COMMIT, Compiled, checked_out, executed, per_dialect
from .errors import LeaseLost, NotFound
from .notifications import EVENTS_CHANNEL
from .refusals import Refusal, refuse_unless, refused
from .schema import EventRow, RunRow, UtcDateTime, metadata, now_utc
from .sqlite_driver import run_here, run_on_thread

__all__ = ("event_values", "insert_fenced", "notify_cte", "pg_events_insert", "sqlite_event_insert")

_events = metadata.tables[EventRow.__tablename__]
_runs = metadata.tables[RunRow.__tablename__]

NOW = sa.bindparam("c_now", type_=UtcDateTime())
"""The time the unit of work stores its rows with."""
THREAD_ID = sa.bindparam("c_thread_id", type_=sa.String())


def array(name: str, of: Any) -> sa.BindParameter[Any]:
    return sa.bindparam(name, type_=postgresql.ARRAY(of))


def sqlite_event_insert() -> sa.Insert:
    """One event (`e_…`) of the thread `c_thread_id`."""
    return _events.insert().values(
        thread_id=THREAD_ID,
        event_id=sa.bindparam("e_event_id", type_=sa.BigInteger()),
        run_id=sa.bindparam("e_run_id", type_=sa.String()),
        type=sa.bindparam("e_type", type_=sa.String()),
        data=sa.bindparam("e_data", type_=sa.LargeBinary()),
        created_at=NOW,
    )


def pg_events_insert() -> sa.Insert:
    """PostgreSQL: the events in the arrays `e_…s` of the thread `c_thread_id`, none for empty arrays."""
    rows = (
        sa.func.unnest(
            array("e_event_ids", sa.BigInteger()),
            array("e_run_ids", sa.String()),
            array("e_types", sa.String()),
            array("e_datas", postgresql.BYTEA()),
        )
        .table_valued("event_id", "run_id", "type", "data")
        .render_derived(name="new_events")
    )
    return _events.insert().from_select(
        ["thread_id", "event_id", "run_id", "type", "data", "created_at"],
        sa.select(THREAD_ID, rows.c.event_id, rows.c.run_id, rows.c.type, rows.c.data, NOW),
    )


def notify_cte() -> sa.CTE:
    """PostgreSQL: `pg_notify` of the events channel with `c_notice`, unless it is NULL; a CTE to read, or it is not sent."""
    notice = sa.bindparam("c_notice", type_=sa.String())
    return (
        sa.select(sa.func.pg_notify(EVENTS_CHANNEL, notice).label("sent"))
        .where(notice.is_not(None))
        .cte("notified")
    )


def count(cte: sa.CTE) -> sa.ScalarSelect[int]:
    return sa.select(sa.func.count()).select_from(cte).scalar_subquery()


def event_values(thread_id: str, events: Sequence[tuple[int, Any]], *, postgres: bool) -> dict[str, Any]:
    """The bind values that store `events` (`(event_id, NewEvent)`), but the rows on SQLite (`sqlite_rows`)."""
    newest = max((event_id for event_id, _ in events), default=None)
    values: dict[str, Any] = {
        "c_thread_id": thread_id,
        "c_now": now_utc(),
        "c_notice": None if newest is None else f"{thread_id} {newest}",
    }
    if postgres:
        values |= {
            "e_event_ids": [event_id for event_id, _ in events],
            "e_run_ids": [event.run_id for _, event in events],
            "e_types": [event.type for _, event in events],
            "e_datas": [event.data for _, event in events],
        }
    return values


def sqlite_rows(
    insert: Compiled, values: dict[str, Any], events: Sequence[tuple[int, Any]]
) -> list[tuple[Any, ...]]:
    return [
        insert.parameters(
            values
            | {"e_event_id": event_id, "e_run_id": event.run_id, "e_type": event.type, "e_data": event.data}
        )
        for event_id, event in events
    ]


# -- the event log's writer -------------------------------------------------------------------------

_HELD = (
    sa.select(_runs.c.lease_owner)
    .where(_runs.c.run_id == sa.bindparam("h_run_id", type_=sa.String()))
    .with_for_update(read=True)
)


def _pg_insert(*, fenced: bool) -> sa.Select[int] | sa.Select[int, int]:
    notified = notify_cte()
    if not fenced:
        return sa.select(count(notified)).add_cte(pg_events_insert().cte("logged"))
    held = _HELD.cte("held")
    refusal = refuse_unless(
        (~sa.exists(sa.select(held.c.lease_owner)), "no run"),
        (
            sa.select(held.c.lease_owner)
            .scalar_subquery()
            .is_distinct_from(sa.bindparam("h_worker_id", type_=sa.String())),
            "lease lost",
        ),
    )
    # The run's row is locked (its owner read) before the events go in, at the statement's end.
    return sa.select(refusal, count(notified)).add_cte(pg_events_insert().cte("logged"))


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
            Compiled.of(_pg_insert(fenced=False), dialect), Compiled.of(_pg_insert(fenced=True), dialect)
        )
    return _Statements(Compiled.of(sqlite_event_insert(), dialect), Compiled.of(_HELD, dialect))


def _insert_on_thread(
    connection: sqlite3.Connection,
    insert_sql: str,
    rows: list[tuple[Any, ...]],
    held_sql: str | None,
    held_parameters: tuple[Any, ...],
    worker_id: str | None,
    ran: list[str],
) -> Refusal | None:
    try:
        ran.append(insert_sql)
        connection.executemany(insert_sql, rows)
        refusal: Refusal | None = None
        if held_sql is not None:
            ran.append(held_sql)
            owner = connection.execute(held_sql, held_parameters).fetchone()
            refusal = "no run" if owner is None else "lease lost" if owner[0] != worker_id else None
        if refusal is None:
            connection.commit()
            ran.append(COMMIT)
        else:
            connection.rollback()
    except BaseException:
        if connection.in_transaction:
            connection.rollback()
        raise
    return refusal


async def _sqlite_insert_on(
    pooled: Any,
    insert_sql: str,
    rows: list[tuple[Any, ...]],
    held: tuple[str, tuple[Any, ...]] | None,
    worker_id: str | None,
    ran: list[str],
    quiet: bool,
) -> Refusal | None:
    held_sql, held_parameters = held if held is not None else (None, ())
    # A busy process's writer keeps the connection's thread, not the loop's (`run_here`): its next
    # transaction is due once this one returns and its interval passed, so a trip that takes
    # longer on a busy loop groups more events into the next; on the loop's thread it committed
    # several times the transactions, of one or two events each. A quiet one has nothing to group,
    # and its trip there was the slowest part of the first word's path (docs/benchmarks.md).
    return await (run_here if quiet else run_on_thread)(
        pooled.dbapi_connection,
        _insert_on_thread,
        insert_sql,
        rows,
        held_sql,
        held_parameters,
        worker_id,
        ran,
    )


async def _pg_insert_on(
    pooled: Any, statement: Compiled, values: dict[str, Any], ran: list[str]
) -> Refusal | None:
    ran.append(statement.sql)
    try:
        await pooled.driver_connection.fetchrow(statement.sql, *statement.parameters(values))
    except Exception as error:
        refusal = refused(error)
        if refusal is None:
            raise
        return refusal
    ran.append(COMMIT)
    return None


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
            refusal = await checked_out(engine, statement.sql, _pg_insert_on, statement, values, ran)
        else:
            rows = sqlite_rows(statements.insert, values, events)
            held = (statements.fenced.sql, statements.fenced.parameters(values)) if fenced else None
            refusal = await checked_out(
                engine,
                statement.sql,
                _sqlite_insert_on,
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
