"""A run's checkpoint: its records, its events and its bookkeeping, in the save's one trip.

A checkpoint is data (`Checkpoint`), not a callback: the conversation store writes it with the
conversation on statements compiled once (`compiled.py`). On SQLite it is part of the save's one
function on aiosqlite's thread; on PostgreSQL, CTEs of the save's one statement, which refuses
itself (`refusals.py`) when a guard fails, so that nothing of it is stored. The design note is
"A checkpoint's trip" in `docs/store.md`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect

from .compiled import Compiled, per_dialect
from .errors import LeaseLost, NotFound
from .event_inserts import (
    NOW,
    THREAD_ID,
    array,
    count,
    event_values,
    notify_cte,
    pg_events_insert,
    sqlite_event_insert,
    sqlite_rows,
)
from .events import NewEvent
from .records import NewRecord
from .refusals import Refusal, refuse_unless
from .run import Run
from .schema import RecordRow, RunRow, RunStatus, ThreadRow, ThreadStatus, metadata, now_utc

__all__ = ("Checkpoint", "SqliteWork", "thread_status_after")

_runs = metadata.tables[RunRow.__tablename__]
_threads = metadata.tables[ThreadRow.__tablename__]
_records = metadata.tables[RecordRow.__tablename__]


def thread_status_after(status: RunStatus) -> ThreadStatus:
    """The status a thread takes when its run takes `status`."""
    match status:
        case "queued" | "running":
            return "running"
        case "awaiting_approval":
            return "awaiting_approval"
        case "failed":
            return "failed"
        case "completed" | "blocked" | "cancelled":
            return "idle"


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """What a run's checkpoint writes besides its conversation, in the same transaction.

    The checkpoint is counted (and the run ended with `finish`) only while `run.lease_owner` holds
    the run running; the thread records `event_id`, the newest event the stored messages reflect.
    """

    run: Run
    event_id: int
    records: Sequence[NewRecord] = ()
    """Records the run's tools made; a tool call's record stored already is kept."""
    events: Sequence[tuple[int, NewEvent]] = ()
    """Events whose ids were reserved; on PostgreSQL other processes are notified of them."""
    finish: RunStatus | None = None
    error: str | None = None
    trace_id: str | None = None
    """The trace of the run's attempt, kept on its row (a run claimed as it was queued has none yet)."""
    now: datetime = field(default_factory=now_utc)

    def values(self, *, postgres: bool) -> dict[str, Any]:
        """The bind values of the checkpoint's statements, by name (on SQLite, without the rows)."""
        run = self.run
        values = event_values(run.thread_id, self.events, postgres=postgres) | {
            "c_now": self.now,
            "c_run_id": run.run_id,
            "c_owner": run.lease_owner,
            "c_event_id": self.event_id,
            "c_finish": self.finish,
            "c_error": self.error,
            "c_thread_status": None if self.finish is None else thread_status_after(self.finish),
            "c_trace_id": self.trace_id,
        }
        if postgres:
            values |= {
                "r_tool_call_ids": [record.tool_call_id for record in self.records],
                "r_kinds": [record.kind for record in self.records],
                "r_datas": [_json(record.data) for record in self.records],
            }
        return values


def _json(data: dict[str, object]) -> bytes:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def raise_refusal(reason: Refusal, checkpoint: Checkpoint) -> None:
    """Raise what `reason` means for the run (a conflict is the caller's to raise)."""
    run = checkpoint.run
    match reason:
        case "no run":
            # Gone with its thread, deleted meanwhile: failing rolls back what the checkpoint saved.
            raise NotFound(f"no run {run.run_id!r}: its thread {run.thread_id!r} was deleted")
        case "lease lost":
            raise LeaseLost(f"run {run.run_id!r} is no longer held by worker {run.lease_owner!r}")
        case "no thread":
            # Deleted meanwhile: failing rolls back the conversation saved with this checkpoint.
            raise NotFound(f"no thread {run.thread_id!r}")
        case _:
            pass  # a conflict: the caller's to raise


# -- the statements -----------------------------------------------------------------------------

_FINISH = sa.bindparam("c_finish", type_=sa.String())
_RUN_ID = sa.bindparam("c_run_id", type_=sa.String())
_COUNT_RUN = (
    _runs.update()
    .where(
        _runs.c.run_id == _RUN_ID,
        _runs.c.lease_owner.is_not_distinct_from(sa.bindparam("c_owner", type_=sa.String())),
        _runs.c.status == "running",
    )
    .values(
        checkpoints=_runs.c.checkpoints + 1,
        trace_id=sa.func.coalesce(sa.bindparam("c_trace_id", type_=sa.String()), _runs.c.trace_id),
        status=sa.func.coalesce(_FINISH, _runs.c.status),
        error=sa.case((_FINISH.is_(None), _runs.c.error), else_=sa.bindparam("c_error", type_=sa.Text())),
        finished_at=sa.case((_FINISH.is_(None), _runs.c.finished_at), else_=NOW),
    )
)
_RUN_EXISTS = sa.select(_runs.c.run_id).where(_runs.c.run_id == _RUN_ID)
_TOUCH_THREAD = (
    _threads.update()
    .where(_threads.c.thread_id == THREAD_ID)
    .values(
        checkpoint_event_id=sa.bindparam("c_event_id", type_=sa.BigInteger()),
        updated_at=NOW,
        status=sa.func.coalesce(sa.bindparam("c_thread_status", type_=sa.String()), _threads.c.status),
    )
)
_RECORD_COLUMNS = ["thread_id", "tool_call_id", "run_id", "kind", "data", "created_at"]
_SQLITE_RECORD = (
    sqlite.insert(_records)
    .values(
        thread_id=THREAD_ID,
        tool_call_id=sa.bindparam("r_tool_call_id", type_=sa.String()),
        run_id=_RUN_ID,
        kind=sa.bindparam("r_kind", type_=sa.String()),
        data=sa.bindparam("r_data", type_=sa.LargeBinary()),
        created_at=NOW,
    )
    .on_conflict_do_nothing(index_elements=list(_records.primary_key.columns))
)


def _pg_records_insert() -> sa.Insert:
    rows = (
        sa.func.unnest(
            array("r_tool_call_ids", sa.String()),
            array("r_kinds", sa.String()),
            array("r_datas", postgresql.BYTEA()),
        )
        .table_valued("tool_call_id", "kind", "data")
        .render_derived(name="new_records")
    )
    return (
        postgresql.insert(_records)
        .from_select(
            _RECORD_COLUMNS,
            sa.select(THREAD_ID, rows.c.tool_call_id, _RUN_ID, rows.c.kind, rows.c.data, NOW),
        )
        .on_conflict_do_nothing(index_elements=list(_records.primary_key.columns))
    )


def pg_checkpointed(written: sa.CTE | None, *more: sa.CTE) -> sa.Select[int, int]:
    """PostgreSQL: the checkpoint's writes as CTEs beside `written` (a conversation's write) and `more`.

    One statement, which refuses itself unless the conversation was written (when `written` is
    given), the run counted under its lease and the thread touched: nothing of it is stored then.
    """
    counted = _COUNT_RUN.returning(_runs.c.run_id).cte("counted")
    touched = _TOUCH_THREAD.returning(_threads.c.thread_id).cte("touched")
    reasons: list[tuple[sa.ColumnElement[bool], Refusal]] = []
    if written is not None:
        reasons.append((count(written) != 1, "conflict"))
    # Checked in this order, which locks the conversation's record, then the run, then the thread,
    # as the statements did one by one.
    no_run: tuple[sa.ColumnElement[bool], Refusal] = (
        sa.and_(count(counted) != 1, ~sa.exists(_RUN_EXISTS)),
        "no run",
    )
    lease_lost: tuple[sa.ColumnElement[bool], Refusal] = (count(counted) != 1, "lease lost")
    no_thread: tuple[sa.ColumnElement[bool], Refusal] = (count(touched) != 1, "no thread")
    reasons += [no_run, lease_lost, no_thread]
    statement = sa.select(refuse_unless(*reasons), count(notify_cte()))
    for cte in (*more, pg_events_insert().cte("logged"), _pg_records_insert().cte("kept")):
        statement = statement.add_cte(cte)
    return statement


@dataclass(frozen=True)
class _SqliteStatements:
    count_run: Compiled
    run_exists: Compiled
    touch_thread: Compiled
    insert_event: Compiled
    insert_record: Compiled


@per_dialect
def _sqlite(dialect: Dialect) -> _SqliteStatements:
    return _SqliteStatements(
        count_run=Compiled.of(_COUNT_RUN, dialect),
        run_exists=Compiled.of(_RUN_EXISTS, dialect),
        touch_thread=Compiled.of(_TOUCH_THREAD, dialect),
        insert_event=Compiled.of(sqlite_event_insert(), dialect),
        insert_record=Compiled.of(_SQLITE_RECORD, dialect),
    )


SqliteWork = Callable[[sqlite3.Connection, list[str]], Refusal | None]
"""Part of a unit of work on SQLite's thread: it appends the SQL it runs to the list, and says what refused it."""


def sqlite_work(checkpoint: Checkpoint, dialect: Dialect) -> SqliteWork:
    """The checkpoint's statements, to run on the thread of a SQLite connection inside its transaction."""
    statements = _sqlite(dialect)
    values = checkpoint.values(postgres=False)
    insert_record = statements.insert_record
    records = [
        insert_record.parameters(
            values
            | {"r_tool_call_id": record.tool_call_id, "r_kind": record.kind, "r_data": _json(record.data)}
        )
        for record in checkpoint.records
    ]
    events = sqlite_rows(statements.insert_event, values, checkpoint.events)
    count_run, run_exists, touch_thread = (
        (statement.sql, statement.parameters(values))
        for statement in (statements.count_run, statements.run_exists, statements.touch_thread)
    )

    def run(connection: sqlite3.Connection, ran: list[str]) -> Refusal | None:
        # The guards first: the rows then inserted name the thread, which must exist.
        ran.append(count_run[0])
        if connection.execute(*count_run).rowcount != 1:
            ran.append(run_exists[0])
            return "no run" if connection.execute(*run_exists).fetchone() is None else "lease lost"
        ran.append(touch_thread[0])
        if connection.execute(*touch_thread).rowcount != 1:
            return "no thread"
        if records:
            ran.append(insert_record.sql)
            connection.executemany(insert_record.sql, records)
        if events:
            ran.append(statements.insert_event.sql)
            connection.executemany(statements.insert_event.sql, events)
        return None

    return run


def pg_values(checkpoint: Checkpoint) -> dict[str, Any]:
    """The bind values of `pg_checkpointed`'s statement."""
    return checkpoint.values(postgres=True)
