"""SQLite's own statements: a unit of work as one function on the connection's thread.

Each unit runs its statements one by one on aiosqlite's thread (`sqlite_driver.py`), checking
each guard as it goes. The units here are a conversation's load and save, the queueing's (the
thread's mark, then the run's insert and its opening events) and a checkpoint's (the run counted
under its lease, the thread touched, the records and events inserted), run after a save.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Dialect

from ..checkpoints import COUNT_RUN, RUN_EXISTS, RUN_ID, TOUCH_THREAD, Checkpoint, json_bytes
from ..compiled import COMMIT, Compiled, first_then_second, per_dialect
from ..event_rows import NOW, THREAD_ID, NewEvent
from ..history_trips import HeadRead, RecordSave
from ..pauses import pause_work
from ..queue_statements import (
    RUN_COLUMNS,
    QueueOutcome,
    QueueStatements,
    Refusals,
    count_of,
    run_values,
    text_of,
)
from ..refusals import Refusal
from ..schema import EventRow, RecordRow, RunRow, metadata
from ..sqlite_driver import run_here, run_on_thread

__all__ = (
    "SqliteWork",
    "checkpoint_work",
    "claim_trip",
    "event_insert",
    "event_rows",
    "insert_events",
    "queue_statements",
    "queue_trip",
    "read_head",
    "write",
    "write_all",
)

_runs = metadata.tables[RunRow.__tablename__]
_records = metadata.tables[RecordRow.__tablename__]
_events = metadata.tables[EventRow.__tablename__]


# -- events ---------------------------------------------------------------------------------------


def event_insert() -> sa.Insert:
    """One event (`e_…`) of the thread `c_thread_id`."""
    return _events.insert().values(
        thread_id=THREAD_ID,
        event_id=sa.bindparam("e_event_id", type_=sa.BigInteger()),
        run_id=sa.bindparam("e_run_id", type_=sa.String()),
        type=sa.bindparam("e_type", type_=sa.String()),
        data=sa.bindparam("e_data", type_=sa.LargeBinary()),
        created_at=NOW,
    )


def event_rows(
    insert: Compiled, values: dict[str, Any], events: Sequence[tuple[int, Any]]
) -> list[tuple[Any, ...]]:
    """The rows of `insert` (`event_insert`) that store `events` (`(event_id, NewEvent)`)."""
    return [
        insert.parameters(
            values
            | {"e_event_id": event_id, "e_run_id": event.run_id, "e_type": event.type, "e_data": event.data}
        )
        for event_id, event in events
    ]


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


async def insert_events(
    pooled: Any,
    insert_sql: str,
    rows: list[tuple[Any, ...]],
    held: tuple[str, tuple[Any, ...]] | None,
    worker_id: str | None,
    ran: list[str],
    quiet: bool,
) -> Refusal | None:
    """The event log writer's unit of work: the events' insert, the run's owner read, the commit."""
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


# -- a load and a save -----------------------------------------------------------------------------


def _read_on_thread(
    connection: sqlite3.Connection,
    record_sql: str,
    record_parameters: tuple[Any, ...],
    history_sql: str,
    history_parameters: list[Any] | None,
    head_slot: int,
    record_head: int,
    cached_head: object,
) -> tuple[Any, list[Any] | None]:
    row = connection.execute(record_sql, record_parameters).fetchone()
    head = None if row is None else row[record_head]
    if row is None or history_parameters is None or head is None or head == cached_head:
        return row, None
    history_parameters[head_slot] = head
    return row, connection.execute(history_sql, history_parameters).fetchall()


async def read_head(pooled: Any, read: HeadRead) -> tuple[Any, list[Any] | None]:
    """A load's statements in one function on the connection's thread: the record's row, and the
    history's rows or `None`."""
    return await run_here(
        pooled.dbapi_connection,
        _read_on_thread,
        read.record.sql,
        read.record_parameters,
        read.history.sql,
        read.history_parameters,
        read.head_slot,
        read.record_head,
        read.skip,
    )


_SaveRows = tuple[str, list[tuple[Any, ...]], str | None, tuple[Any, ...], "SqliteWork | None"]
"""A save's part of a unit: its entries' insert and rows, its record's write (`None`: none) and
parameters, and its checkpoint's statements."""


def _write_on_thread(
    connection: sqlite3.Connection, saves: Sequence[_SaveRows], commit: bool, ran: list[str]
) -> tuple[int, Refusal] | None:
    refused: tuple[int, Refusal] | None = None
    try:
        for index, (insert_sql, entry_rows, record_sql, record_parameters, then) in enumerate(saves):
            refusal: Refusal | None = None
            if record_sql is not None:
                if entry_rows:
                    ran.append(insert_sql)
                    connection.executemany(insert_sql, entry_rows)
                ran.append(record_sql)
                if connection.execute(record_sql, record_parameters).rowcount != 1:
                    refusal = "conflict"
            if refusal is None and then is not None:
                refusal = then(connection, ran)
            if refusal is not None:
                refused = (index, refusal)
                break
        if commit:
            if refused is None:
                connection.commit()
                ran.append(COMMIT)
            else:
                connection.rollback()
    except BaseException:
        if commit and connection.in_transaction:
            connection.rollback()
        raise
    return refused


def _rows(save: RecordSave) -> _SaveRows:
    insert = save.insert_entries
    entry_rows = [
        insert.parameters(
            {
                "entry_id": entry_id,
                "parent_id": parent_id,
                "kind": kind,
                "message": message,
                "instructions_id": instructions_id,
            }
        )
        for entry_id, parent_id, kind, message, instructions_id in save.entries
    ]
    then = None if save.checkpoint is None else checkpoint_work(save.checkpoint, save.dialect)
    record = save.record
    return (
        insert.sql,
        entry_rows,
        record.sql if save.writes_record else None,
        record.parameters(save.bound) if save.writes_record else (),
        then,
    )


async def write(pooled: Any, *, save: RecordSave, ran: list[str]) -> Refusal | None:
    """A save on SQLite: the entries, the record and the checkpoint in one unit of work (`run_here`)."""
    refused = await write_all(pooled, [save], ran=ran)
    return None if refused is None else refused[1]


async def write_all(
    pooled: Any, saves: Sequence[RecordSave], *, ran: list[str]
) -> tuple[int, Refusal] | None:
    """Saves (each as `write` runs it) one after the other in one unit of work: all commit, or none
    does. Returns the first refused (its index) and why, `None` when none was."""
    # Inside a transaction of SQLAlchemy's (`commit` false), the unit leaves it open: the thread's.
    commit = all(save.commit for save in saves)
    return await (run_here if commit else run_on_thread)(
        pooled.dbapi_connection, _write_on_thread, [_rows(save) for save in saves], commit, ran
    )


# -- a checkpoint ---------------------------------------------------------------------------------

_SQLITE_RECORD = (
    sqlite.insert(_records)
    .values(
        thread_id=THREAD_ID,
        tool_call_id=sa.bindparam("r_tool_call_id", type_=sa.String()),
        run_id=RUN_ID,
        kind=sa.bindparam("r_kind", type_=sa.String()),
        data=sa.bindparam("r_data", type_=sa.LargeBinary()),
        created_at=NOW,
    )
    .on_conflict_do_nothing(index_elements=list(_records.primary_key.columns))
)


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
        count_run=Compiled.of(COUNT_RUN, dialect),
        run_exists=Compiled.of(RUN_EXISTS, dialect),
        touch_thread=Compiled.of(TOUCH_THREAD, dialect),
        insert_event=Compiled.of(event_insert(), dialect),
        insert_record=Compiled.of(_SQLITE_RECORD, dialect),
    )


SqliteWork = Callable[[sqlite3.Connection, list[str]], Refusal | None]
"""Part of a unit of work on SQLite's thread: it appends the SQL it runs to the list, and says what refused it."""


def checkpoint_work(checkpoint: Checkpoint, dialect: Dialect) -> SqliteWork:
    """The checkpoint's statements, to run on the thread of a SQLite connection inside its transaction."""
    statements = _sqlite(dialect)
    values = checkpoint.values(postgres=False)
    insert_record = statements.insert_record
    records = [
        insert_record.parameters(
            values
            | {
                "r_tool_call_id": record.tool_call_id,
                "r_kind": record.kind,
                "r_data": json_bytes(record.data),
            }
        )
        for record in checkpoint.records
    ]
    events = event_rows(statements.insert_event, values, checkpoint.events)
    pause = None if checkpoint.pause is None else pause_work(checkpoint.pause, values, dialect)
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
        return None if pause is None else pause(connection, ran)

    return run


# -- claiming a queued run -------------------------------------------------------------------------

_THREAD_ID = RUN_COLUMNS.index("thread_id")


async def claim_trip(
    pooled: Any, claim: Compiled, reserve: Compiled, values: dict[str, Any], ran: list[str]
) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """The run's claim, then its thread's reservation, in one function on the connection's thread:
    the claimed run's row and its thread's, or `None`."""

    def of_its_thread(claimed: Sequence[Any]) -> tuple[Any, ...]:
        # The thread is the claimed run's, known on the driver's thread.
        return reserve.parameters(values | {"k_thread_id": claimed[_THREAD_ID]})

    raw_run, raw_reserved = await run_here(
        pooled.dbapi_connection,
        first_then_second,
        claim.sql,
        claim.parameters(values),
        reserve.sql,
        of_its_thread,
        ran,
    )
    if raw_run is None:
        return None
    return claim.row(raw_run), reserve.row(raw_reserved)


# -- queueing a run -------------------------------------------------------------------------------


def queue_statements(
    dialect: Dialect, mark: sa.Update | sa.Insert, *, claiming: bool, opening: bool
) -> QueueStatements:
    """The thread's mark, the run's insert and, for `opening`, one opening event's insert."""
    values = run_values(postgres=False, claiming=claiming)
    insert = _runs.insert().values(**values).returning(*_runs.c)
    event = Compiled.of(event_insert(), dialect) if opening else None
    return QueueStatements(Compiled.of(mark, dialect), Compiled.of(insert, dialect), event)


async def queue_trip(
    pooled: Any,
    statements: QueueStatements,
    values: dict[str, Any],
    opening: Sequence[NewEvent],
    ran: list[str],
) -> QueueOutcome:
    """The queueing on aiosqlite's connection, in one function on its thread: the thread's mark,
    then the run's insert (and its `opening` events) unless the mark says the run is refused."""
    mark = statements.mark
    insert = statements.insert
    assert insert is not None
    insert_parameters = insert.parameters(values)

    def unless_refused(marked: Sequence[Any]) -> tuple[Any, ...] | None:
        # No insert when the thread's row says the run is refused: a key, an active run, approvals.
        return None if marked[2] is not None or marked[3] or marked[4] else insert_parameters

    then = None
    event = statements.event
    if event is not None:

        def opening_rows(marked: Sequence[Any]) -> list[tuple[Any, ...]]:
            first = int(marked[1]) - int(values["q_claim"]) + 1
            event_values = {"c_thread_id": values["q_thread_id"], "c_now": values["q_now"]}
            return event_rows(event, event_values, list(enumerate(opening, start=first)))

        then = (event.sql, opening_rows)
    raw_mark, raw_row = await run_here(
        pooled.dbapi_connection,
        first_then_second,
        mark.sql,
        mark.parameters(values),
        insert.sql,
        unless_refused,
        ran,
        then,
    )
    if raw_mark is None:
        return "no thread", None, None
    user_id, last_event_id, keyed, active, pending, sent, revision = mark.row(raw_mark)
    state = Refusals(
        str(user_id),
        int(last_event_id),
        None if keyed is None else str(keyed),
        bool(active),
        bool(pending),
        count_of(sent),
        text_of(revision),
    )
    if raw_row is None:
        why: Refusal = "keyed" if keyed is not None else "active" if active else "pending"
        return why, state, None
    return None, state, dict(zip(RUN_COLUMNS, insert.row(raw_row), strict=True))
