"""PostgreSQL's own statements: each write one statement of CTEs, which refuses itself when a guard fails.

A refusal is raised inside the statement (`refusals.py`), so that nothing of it is stored; the
statements here are a conversation's load and save (the record's guarded write and the new
entries' insert), the queueing's (the thread's mark, the run's insert and its opening events)
and a checkpoint's (the run counted under its lease, the thread touched, the records and events
inserted), written with a conversation's save by `histories.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import visitors

from ..checkpoints import COUNT_RUN, RECORD_COLUMNS, RUN_EXISTS, RUN_ID, TOUCH_THREAD, Checkpoint
from ..compiled import COMMIT, Compiled, begun
from ..event_rows import HELD, NOW, THREAD_ID
from ..history_trips import HeadRead, NewEntry, RecordSave
from ..notifications import EVENTS_CHANNEL
from ..pauses import pause_ctes
from ..queue_statements import (
    RUN_COLUMNS,
    QueueOutcome,
    QueueStatements,
    Refusals,
    bind,
    count_of,
    run_values,
    text_of,
)
from ..refusals import Refusal, refuse_unless, refused
from ..schema import (
    ConversationEntryRow,
    ConversationRecordRow,
    EventRow,
    RecordRow,
    RunRow,
    ThreadRow,
    metadata,
)

__all__ = (
    "CARRIED",
    "carried",
    "checkpoint_values",
    "checkpointed",
    "claim_statement",
    "claim_trip",
    "events_statement",
    "insert_events",
    "queue_statements",
    "queue_trip",
    "read_head",
    "save_statement",
    "write",
)

_runs = metadata.tables[RunRow.__tablename__]
_records = metadata.tables[RecordRow.__tablename__]
_events = metadata.tables[EventRow.__tablename__]
_threads = metadata.tables[ThreadRow.__tablename__]
_entries = metadata.tables[ConversationEntryRow.__tablename__]
_conversations = metadata.tables[ConversationRecordRow.__tablename__]


# -- events ---------------------------------------------------------------------------------------


def array(name: str, of: Any) -> sa.BindParameter[Any]:
    return sa.bindparam(name, type_=postgresql.ARRAY(of))


def events_insert() -> sa.Insert:
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


def events_statement(*, fenced: bool) -> sa.Select[int] | sa.Select[int, int]:
    """The events' insert and notice; `fenced`: only while `h_worker_id` holds the run `h_run_id`."""
    notified = notify_cte()
    if not fenced:
        return sa.select(count(notified)).add_cte(events_insert().cte("logged"))
    held = HELD.cte("held")
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
    return sa.select(refusal, count(notified)).add_cte(events_insert().cte("logged"))


async def insert_events(
    pooled: Any, statement: Compiled, values: dict[str, Any], ran: list[str]
) -> Refusal | None:
    """The event log writer's one statement on asyncpg, its own transaction."""
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


# -- a load and a save -----------------------------------------------------------------------------


def save_statement(
    record_write: Any,
    *,
    with_checkpoint: bool = False,
    with_pause: bool = False,
    carrying: Any | None = None,
) -> sa.Select[int] | sa.Select[int, int]:
    """PostgreSQL: `record_write` and the new entries' insert in one statement, the entries only if it wrote.

    The record's foreign key to its head is checked at the end of the statement, when the entries
    it names are in. `with_checkpoint`: a run's checkpoint too (`checkpointed`); `with_pause`: and
    the calls its end holds (`pauses.pause_ctes`). `carrying` (with a checkpoint): another
    conversation's record write, its binds named `f_…` (`carried`), written first with its entries.
    """
    written = record_write.returning(_conversations.c.conversation_id).cte("written")
    inserted = _entries_insert(written, "", "new_entries").cte("inserted")
    if with_checkpoint:
        if carrying is None:
            return checkpointed(written, inserted, pause=with_pause)
        first = carrying.returning(_conversations.c.conversation_id).cte("carried_written")
        return checkpointed(
            written,
            inserted,
            pause=with_pause,
            carried=(first, _entries_insert(first, CARRIED, "carried_entries").cte("carried_inserted")),
        )
    return sa.select(sa.func.count()).select_from(written).add_cte(inserted)


CARRIED = "f_"
"""The prefix of a carried write's binds, in the statement that carries it (`save_statement(carrying=)`)."""


def carried(record_write: sa.Update | sa.Insert) -> sa.Update | sa.Insert:
    """`record_write` with its binds prefixed `CARRIED`, for another conversation's statement to carry."""
    renamed: dict[str, sa.BindParameter[Any]] = {}

    def rename(element: Any, **_: Any) -> sa.BindParameter[Any] | None:
        if not isinstance(element, sa.BindParameter):
            return None
        bind = cast(
            "sa.BindParameter[Any]", element
        )  # a generic class: `isinstance` leaves its parameter unknown
        key = CARRIED + str(bind.key)
        found = renamed.get(key)
        if found is None:
            kind: sa.types.TypeEngine[Any] = bind.type
            found = renamed[key] = sa.bindparam(key, type_=kind)
        return found

    statement = visitors.replacement_traverse(record_write, {}, rename)
    assert isinstance(statement, sa.Update | sa.Insert)
    return statement


def _entries_insert(written: sa.CTE, prefix: str, name: str) -> sa.Insert:
    """The new entries (arrays `{prefix}entry_ids`, …) inserted only if `written` wrote its record."""
    rows = (
        sa.func.unnest(
            sa.bindparam(f"{prefix}entry_ids", type_=postgresql.ARRAY(postgresql.UUID(as_uuid=False))),
            sa.bindparam(f"{prefix}parent_ids", type_=postgresql.ARRAY(postgresql.UUID(as_uuid=False))),
            sa.bindparam(f"{prefix}kinds", type_=postgresql.ARRAY(sa.String)),
            sa.bindparam(f"{prefix}messages", type_=postgresql.ARRAY(postgresql.BYTEA)),
            sa.bindparam(f"{prefix}instructions_ids", type_=postgresql.ARRAY(sa.String)),
        )
        .table_valued("entry_id", "parent_id", "kind", "message", "instructions_id")
        .render_derived(name=name)
    )
    return _entries.insert().from_select(
        ["entry_id", "parent_id", "kind", "message", "instructions_id"],
        sa.select(
            rows.c.entry_id, rows.c.parent_id, rows.c.kind, rows.c.message, rows.c.instructions_id
        ).where(sa.exists(sa.select(written.c.conversation_id))),
    )


async def read_head(pooled: Any, read: HeadRead) -> tuple[Any, list[Any] | None]:
    """A load's statements on asyncpg: the record's row, then the history's rows (or `None`) only when needed."""
    driver = pooled.driver_connection
    raw_record = await driver.fetchrow(read.record.sql, *read.record_parameters)
    head = None if raw_record is None else raw_record[read.record_head]
    history_parameters = read.history_parameters
    if history_parameters is None or head is None or str(head) == read.cached_head:
        return raw_record, None
    history_parameters[read.head_slot] = head
    return raw_record, await driver.fetch(read.history.sql, *history_parameters)


def _entry_arrays(entries: Sequence[NewEntry], prefix: str = "") -> dict[str, list[Any]]:
    return {
        f"{prefix}entry_ids": [entry[0] for entry in entries],
        f"{prefix}parent_ids": [entry[1] for entry in entries],
        f"{prefix}kinds": [entry[2] for entry in entries],
        f"{prefix}messages": [entry[3] for entry in entries],
        f"{prefix}instructions_ids": [entry[4] for entry in entries],
    }


async def write(
    pooled: Any, *, save: RecordSave, ran: list[str], carrying: RecordSave | None = None
) -> Refusal | None:
    """A save on PostgreSQL: one statement (`save_statement`), in the connection's transaction unless `commit`.

    `carrying`: another conversation's save, its record write in the same statement (compiled with
    `save_statement(carrying=)`); a conflict of its own is refused as `carried conflict`.
    """
    if not save.commit:
        await begun(pooled)
    checkpoint, record = save.checkpoint, save.record
    bound = save.bound | _entry_arrays(save.entries)
    if carrying is not None:
        bound |= {CARRIED + name: value for name, value in carrying.bound.items()}
        bound |= _entry_arrays(carrying.entries, CARRIED)
    if checkpoint is not None:
        bound |= checkpoint_values(checkpoint)
    ran.append(record.sql)
    try:
        count: int = await pooled.driver_connection.fetchval(record.sql, *record.parameters(bound))
    except Exception as error:
        refusal = refused(error)
        if refusal is None:
            raise
        return refusal
    if save.commit:
        ran.append(COMMIT)
    return None if checkpoint is not None or count == 1 else "conflict"


# -- a checkpoint ---------------------------------------------------------------------------------


def _records_insert() -> sa.Insert:
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
            RECORD_COLUMNS,
            sa.select(THREAD_ID, rows.c.tool_call_id, RUN_ID, rows.c.kind, rows.c.data, NOW),
        )
        .on_conflict_do_nothing(index_elements=list(_records.primary_key.columns))
    )


def checkpointed(
    written: sa.CTE | None,
    *more: sa.CTE,
    pause: bool = False,
    carried: tuple[sa.CTE, sa.CTE] | None = None,
) -> sa.Select[int, int]:
    """PostgreSQL: the checkpoint's writes as CTEs beside `written` (a conversation's write) and `more`.

    One statement, which refuses itself unless the conversation was written (when `written` is
    given), the run counted under its lease and the thread touched: nothing of it is stored then.
    `pause`: the calls the run's end holds too, refused (`held`) unless every one is new.
    `carried`: another conversation's write and its entries' insert, refused (`carried conflict`)
    unless written.
    """
    counted = COUNT_RUN.returning(_runs.c.run_id).cte("counted")
    touched = TOUCH_THREAD.returning(_threads.c.thread_id).cte("touched")
    reasons: list[tuple[sa.ColumnElement[bool], Refusal]] = []
    if carried is not None:
        reasons.append((count(carried[0]) != 1, "carried conflict"))
        more = (*carried, *more)
    if written is not None:
        reasons.append((count(written) != 1, "conflict"))
    # Checked in this order, which locks the conversation's record, then the run, then the thread,
    # as the statements did one by one.
    no_run: tuple[sa.ColumnElement[bool], Refusal] = (
        sa.and_(count(counted) != 1, ~sa.exists(RUN_EXISTS)),
        "no run",
    )
    lease_lost: tuple[sa.ColumnElement[bool], Refusal] = (count(counted) != 1, "lease lost")
    no_thread: tuple[sa.ColumnElement[bool], Refusal] = (count(touched) != 1, "no thread")
    reasons += [no_run, lease_lost, no_thread]
    if pause:
        held, requested = pause_ctes()
        reasons.append((count(held) != sa.bindparam("a_count", type_=sa.Integer()), "held"))
        more = (*more, held, requested)
    statement = sa.select(refuse_unless(*reasons), count(notify_cte()))
    for cte in (*more, events_insert().cte("logged"), _records_insert().cte("kept")):
        statement = statement.add_cte(cte)
    return statement


def checkpoint_values(checkpoint: Checkpoint) -> dict[str, Any]:
    """The bind values of `checkpointed`'s statement."""
    return checkpoint.values(postgres=True)


# -- claiming a queued run -------------------------------------------------------------------------


def claim_statement(
    claim: sa.Update, reserve: Callable[[sa.ColumnElement[str]], sa.Update]
) -> sa.Select[Any]:
    """The run's claim and its thread's reservation (`reserve` of the claimed run's thread) as one statement."""
    claimed = claim.cte("claimed")
    reserved = reserve(claimed.c.thread_id).cte("reserved")
    return sa.select(
        *(claimed.c[name] for name in RUN_COLUMNS), reserved.c.user_id, reserved.c.last_event_id
    ).select_from(claimed.join(reserved, sa.true()))


async def claim_trip(
    pooled: Any, claim: Compiled, values: dict[str, Any], ran: list[str]
) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """The claim's one statement on asyncpg: the claimed run's row and its thread's, or `None`."""
    ran.append(claim.sql)
    raw = await pooled.driver_connection.fetchrow(claim.sql, *claim.parameters(values))
    ran.append(COMMIT)
    if raw is None:
        return None
    row = claim.row(raw)
    return row[: len(RUN_COLUMNS)], row[len(RUN_COLUMNS) :]


# -- queueing a run -------------------------------------------------------------------------------


def _opening(marked: sa.CTE, inserted: sa.CTE) -> sa.CTE:
    """PostgreSQL: the run's opening events (the arrays `o_…s`) stored from the first id it reserved,
    and their notice; nothing when the run was refused (no row inserted). A CTE to read."""
    rows = (
        sa.func.unnest(array("o_types", sa.String()), array("o_datas", postgresql.BYTEA()))
        .table_valued("type", "data", with_ordinality="position")
        .render_derived(name="opening_events")
    )
    first = marked.c.last_event_id - bind("q_claim", sa.BigInteger()) + 1
    stored = (
        _events.insert()
        .from_select(
            ["thread_id", "event_id", "run_id", "type", "data", "created_at"],
            sa.select(
                inserted.c.thread_id,
                first + rows.c.position - 1,
                inserted.c.run_id,
                rows.c.type,
                rows.c.data,
                inserted.c.created_at,
            ).select_from(inserted.join(marked, sa.true()).join(rows, sa.true())),
        )
        .returning(_events.c.thread_id, _events.c.event_id)
        .cte("opened")
    )
    # The followers in other processes learn of them at once, as of any stored event (`EventListener`).
    notice = sa.func.concat(stored.c.thread_id, " ", sa.func.max(stored.c.event_id))
    return (
        sa.select(sa.func.pg_notify(EVENTS_CHANNEL, notice).label("sent"))
        .select_from(stored)
        .group_by(stored.c.thread_id)
        .cte("opening_notified")
    )


def _queue_statement(
    mark: sa.Update | sa.Insert, *, claiming: bool, opening: bool
) -> sa.Select[Any, *tuple[Any, ...]]:
    """PostgreSQL: the mark and the insert in one statement, which refuses itself when the run is refused.

    `opening`: the run's first events are stored with it (`_opening`).
    """
    marked = mark.cte("marked")
    values = run_values(postgres=True, claiming=claiming)
    allowed = sa.and_(marked.c.keyed.is_(None), sa.not_(marked.c.active), sa.not_(marked.c.pending))
    inserted = (
        _runs.insert()
        .from_select(list(values), sa.select(*values.values()).select_from(marked).where(allowed))
        .returning(*_runs.c)
        .cte("inserted")
    )

    def first(column: sa.ColumnElement[Any]) -> sa.ScalarSelect[Any]:
        return sa.select(column).scalar_subquery()

    reasons: list[tuple[sa.ColumnElement[bool], Refusal]] = [
        (~sa.exists(sa.select(marked.c.user_id)), "no thread"),
        (first(marked.c.keyed).is_not(None), "keyed"),
        (first(marked.c.active), "active"),
        (first(marked.c.pending), "pending"),
    ]
    # Outer joins: the one row of `outcome` is always there, so its refusal is always evaluated.
    outcome = sa.select(refuse_unless(*reasons).label("refused")).subquery("outcome")
    notified: sa.ColumnElement[Any] = sa.null()
    if opening:
        notified = sa.select(sa.func.count()).select_from(_opening(marked, inserted)).scalar_subquery()
    return sa.select(
        outcome.c.refused,
        marked.c.user_id,
        marked.c.last_event_id,
        marked.c.sent,
        marked.c.revision,
        notified.label("notified"),
        *(inserted.c[name] for name in RUN_COLUMNS),
    ).select_from(outcome.outerjoin(marked, sa.true()).outerjoin(inserted, sa.true()))


async def queue_trip(
    pooled: Any, statements: QueueStatements, values: dict[str, Any], ran: list[str]
) -> QueueOutcome:
    """The queueing's one statement on a pooled asyncpg connection (the opening events are its own arrays)."""
    mark = statements.mark
    ran.append(mark.sql)
    try:
        raw = await pooled.driver_connection.fetchrow(mark.sql, *mark.parameters(values))
    except Exception as error:
        refusal = refused(error)
        if refusal is None:
            raise
        return refusal, None, None
    ran.append(COMMIT)
    row = mark.row(raw)
    state = Refusals(str(row[1]), int(row[2]), None, False, False, count_of(row[3]), text_of(row[4]))
    return None, state, dict(zip(RUN_COLUMNS, row[6:], strict=True))


def queue_statements(
    dialect: Dialect, mark: sa.Update | sa.Insert, *, claiming: bool, opening: bool
) -> QueueStatements:
    """The thread's mark and the run's insert (and the opening events) as one statement."""
    statement = _queue_statement(mark, claiming=claiming, opening=opening)
    return QueueStatements(Compiled.of(statement, dialect), None, None)
