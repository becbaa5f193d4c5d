"""Queueing a run in one trip: the thread's UPDATE that reads what refuses one, then its INSERT.

The UPDATE comes first and serializes the thread's writers (its row lock on PostgreSQL, the
write lock on SQLite); its RETURNING reads what may refuse the run and, for a rate limit, the
user's recent messages. The INSERT may create the run claimed by a worker and started. See
"Queueing a run is one trip" in `docs/store.md`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine

from .compiled import COMMIT, Compiled, checked_out, executed, first_then_second, per_dialect
from .event_inserts import array, sqlite_event_insert, sqlite_rows
from .events import NewEvent
from .leases import Worker
from .notifications import EVENTS_CHANNEL
from .refusals import Refusal, refuse_unless, refused
from .schema import (
    ACTIVE_RUN_STATUSES,
    ApprovalRow,
    ConversationRecordRow,
    EventRow,
    RunKind,
    RunRow,
    ThreadRow,
    UtcDateTime,
    metadata,
    now_utc,
)
from .sqlite_driver import run_here
from .threads import title_from

__all__ = ("Refusals", "queue")

_runs = metadata.tables[RunRow.__tablename__]
_approvals = metadata.tables[ApprovalRow.__tablename__]
_threads = metadata.tables[ThreadRow.__tablename__]
_records = metadata.tables[ConversationRecordRow.__tablename__]
_events = metadata.tables[EventRow.__tablename__]


@dataclass(frozen=True)
class Refusals:
    """What the thread's UPDATE read: its user, its event counter, what may refuse a run, and its revision."""

    user_id: str
    last_event_id: int
    keyed: str | None
    active: bool
    pending: bool
    sent: int | None
    revision: str | None
    """The revision of the thread's conversation (`None`: nothing stored yet), as the run was queued."""


_RUN_COLUMNS = tuple(_runs.c.keys())


def _bind(name: str, type_: Any) -> sa.BindParameter[Any]:
    return sa.bindparam(name, type_=type_)


def _mark(
    *, keyed: bool, counting: bool, claiming: bool, titled: bool, owned: bool, creating: str | None
) -> sa.Update | sa.Insert:
    """Mark the thread running (reserving `q_claim` ids), returning what may refuse the run.

    `owned`: only a thread of the user `q_user_id`; another user's is not found. `creating` (a
    dialect's name): the thread is created when missing (an upsert, `_creating`).
    """
    threads = _threads.c
    values: dict[str, Any] = {"updated_at": _bind("q_now", UtcDateTime()), "status": "running"}
    if titled:
        values["title"] = sa.case((threads.title == "", _bind("q_title", sa.String())), else_=threads.title)
    if claiming:
        values["last_event_id"] = threads.last_event_id + _bind("q_claim", sa.BigInteger())
    # SQLAlchemy renders RETURNING's columns unqualified, which a subquery would take for its own
    # table's: the updated row is named in full, and the subqueries' tables get aliases.
    this_thread = sa.literal_column("threads.thread_id", sa.String())
    runs = _runs.alias("other_runs")
    key: sa.ColumnElement[Any] = sa.null()
    if keyed:
        key = (
            sa.select(runs.c.run_id)
            .where(runs.c.thread_id == this_thread, runs.c.idempotency_key == _bind("q_key", sa.String()))
            .scalar_subquery()
        )
    # Literals, not a list: a list would be an expanding parameter, which compiled SQL cannot hold.
    statuses = [sa.literal(status) for status in ACTIVE_RUN_STATUSES]
    active = sa.exists().where(runs.c.thread_id == this_thread, runs.c.status.in_(statuses))
    approvals = _approvals.alias("pending_approvals")
    pending = sa.exists().where(approvals.c.thread_id == this_thread, approvals.c.status == "pending")
    sent: sa.ColumnElement[Any] = sa.null()
    if counting:
        owners = _threads.alias("owners")
        theirs = sa.select(owners.c.thread_id).where(
            owners.c.user_id == sa.literal_column("threads.user_id", sa.String())
        )
        sent = (
            sa.select(sa.func.count())
            .select_from(runs)
            .where(
                runs.c.thread_id.in_(theirs),
                runs.c.kind == "message",
                runs.c.created_at >= _bind("q_since", UtcDateTime()),
            )
            .scalar_subquery()
        )
    # The run's first load needs no trip when the store remembers this revision (`Claimed.conversation`).
    records = _records.alias("thread_conversation")
    revision = sa.select(records.c.revision).where(records.c.conversation_id == this_thread).scalar_subquery()
    returned = (
        threads.user_id,
        threads.last_event_id,
        key.label("keyed"),
        active.label("active"),
        pending.label("pending"),
        sent.label("sent"),
        revision.label("revision"),
    )
    if creating is not None:
        return _creating(creating, values, claiming=claiming, titled=titled).returning(*returned)
    found = threads.thread_id == _bind("q_thread_id", sa.String())
    if owned:
        found = sa.and_(found, threads.user_id == _bind("q_user_id", sa.String()))
    return _threads.update().where(found).values(**values).returning(*returned)


def _creating(dialect: str, marking: dict[str, Any], *, claiming: bool, titled: bool) -> sa.Insert:
    """The thread `q_thread_id` of `q_user_id` inserted running, or marked as `marking` says if it
    exists (and is theirs); neither when `q_unless` names a thread of that user's own (nothing
    returned: `no thread`). SQLite and PostgreSQL spell the upsert alike."""
    threads = _threads.c
    user: Any = _bind("q_user_id", sa.String())
    now: Any = _bind("q_now", UtcDateTime())
    row: dict[str, Any] = {
        "thread_id": _bind("q_thread_id", sa.String()),
        "user_id": user,
        "title": _bind("q_title", sa.String()) if titled else sa.literal(""),
        "status": sa.literal("running"),
        "created_at": now,
        "updated_at": now,
        "last_event_id": _bind("q_claim", sa.BigInteger()) if claiming else sa.literal(0, sa.BigInteger()),
        "checkpoint_event_id": sa.literal(0, sa.BigInteger()),
    }
    own = _threads.alias("own_threads")
    unless_owned = ~sa.exists().where(
        own.c.thread_id == _bind("q_unless", sa.String()), own.c.user_id == user
    )
    source = sa.select(*(value.label(name) for name, value in row.items())).where(unless_owned)
    insert = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(_threads)
    return insert.from_select(list(row), source).on_conflict_do_update(
        index_elements=[threads.thread_id], set_=marking, where=threads.user_id == user
    )


def _values(*, postgres: bool, claiming: bool) -> dict[str, Any]:
    expires: Any = _bind("q_expires", UtcDateTime())
    if postgres and claiming:
        # The database's clock, as every lease (see `leases.py`).
        expires = sa.func.statement_timestamp(type_=UtcDateTime()) + sa.cast(
            _bind("q_lease", sa.Interval()), sa.Interval()
        )
    return {
        "run_id": _bind("q_run_id", sa.String()),
        "thread_id": _bind("q_thread_id", sa.String()),
        "kind": _bind("q_kind", sa.String()),
        "status": _bind("q_status", sa.String()),
        "content": _bind("q_content", sa.Text()),
        "file_ids": _bind("q_file_ids", sa.Text()),
        "idempotency_key": _bind("q_key", sa.String()),
        "attempt": _bind("q_attempt", sa.Integer()),
        "checkpoints": 0,
        "created_at": _bind("q_now", UtcDateTime()),
        "started_at": _bind("q_started", UtcDateTime()),
        "lease_owner": _bind("q_owner", sa.String()),
        "lease_expires_at": expires,
    }


def _pg_opening(marked: sa.CTE, inserted: sa.CTE) -> sa.CTE:
    """PostgreSQL: the run's opening events (the arrays `o_…s`) stored from the first id it reserved,
    and their notice; nothing when the run was refused (no row inserted). A CTE to read."""
    rows = (
        sa.func.unnest(array("o_types", sa.String()), array("o_datas", postgresql.BYTEA()))
        .table_valued("type", "data", with_ordinality="position")
        .render_derived(name="opening_events")
    )
    first = marked.c.last_event_id - _bind("q_claim", sa.BigInteger()) + 1
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


def _pg_statement(
    mark: sa.Update | sa.Insert, *, claiming: bool, opening: bool
) -> sa.Select[Any, *tuple[Any, ...]]:
    """PostgreSQL: the mark and the insert in one statement, which refuses itself when the run is refused.

    `opening`: the run's first events are stored with it (`_pg_opening`).
    """
    marked = mark.cte("marked")
    values = _values(postgres=True, claiming=claiming)
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
        notified = sa.select(sa.func.count()).select_from(_pg_opening(marked, inserted)).scalar_subquery()
    return sa.select(
        outcome.c.refused,
        marked.c.user_id,
        marked.c.last_event_id,
        marked.c.sent,
        marked.c.revision,
        notified.label("notified"),
        *(inserted.c[name] for name in _RUN_COLUMNS),
    ).select_from(outcome.outerjoin(marked, sa.true()).outerjoin(inserted, sa.true()))


@dataclass(frozen=True)
class _Statements:
    mark: Compiled
    """SQLite: the thread's UPDATE. PostgreSQL: both, one statement (the opening events too)."""
    insert: Compiled | None
    event: Compiled | None
    """SQLite: one opening event."""


@per_dialect
def _statements(dialect: Dialect, shape: tuple[bool, bool, bool, bool, bool, bool, bool]) -> _Statements:
    keyed, counting, claiming, titled, owned, opening, creating = shape
    mark = _mark(
        keyed=keyed,
        counting=counting,
        claiming=claiming,
        titled=titled,
        owned=owned,
        creating=dialect.name if creating else None,
    )
    if dialect.name == "postgresql":
        statement = _pg_statement(mark, claiming=claiming, opening=opening)
        return _Statements(Compiled.of(statement, dialect), None, None)
    values = _values(postgres=False, claiming=claiming)
    insert = _runs.insert().values(**values).returning(*_runs.c)
    event = Compiled.of(sqlite_event_insert(), dialect) if opening else None
    return _Statements(Compiled.of(mark, dialect), Compiled.of(insert, dialect), event)


_Outcome = tuple[Refusal | None, Refusals | None, dict[str, Any] | None]


async def _queue_on(
    pooled: Any, statements: _Statements, values: dict[str, Any], opening: Sequence[NewEvent], ran: list[str]
) -> _Outcome:
    """The trip, on a pooled connection: what `queue` returns; on SQLite `opening` is stored in it
    when its statement is there (on PostgreSQL it is one of the statement's own arrays)."""
    mark = statements.mark
    if statements.insert is None:
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
        state = Refusals(str(row[1]), int(row[2]), None, False, False, _count(row[3]), _text(row[4]))
        return None, state, dict(zip(_RUN_COLUMNS, row[6:], strict=True))
    insert = statements.insert
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
            return sqlite_rows(event, event_values, list(enumerate(opening, start=first)))

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
        _count(sent),
        _text(revision),
    )
    if raw_row is None:
        why: Refusal = "keyed" if keyed is not None else "active" if active else "pending"
        return why, state, None
    return None, state, dict(zip(_RUN_COLUMNS, insert.row(raw_row), strict=True))


async def queue(
    engine: AsyncEngine,
    thread_id: str,
    kind: RunKind,
    content: str,
    idempotency_key: str | None,
    worker: Worker | None,
    *,
    claim_events: int | None,
    count_since: datetime | None,
    user_id: str | None = None,
    run_id: str | None = None,
    opening: Sequence[NewEvent] = (),
    create_unless: str | None = None,
    file_ids: str | None = None,
) -> tuple[Refusal | None, Refusals | None, dict[str, Any] | None]:
    """Mark the thread running and insert the run (claimed by `worker`, if given) in one trip, unless refused.

    With `user_id`, a thread of another user is refused as `no thread`, as a missing one is; with
    `create_unless` too, a missing thread is created (theirs), unless `create_unless` is the id of
    a thread of theirs (then refused as `no thread`, nothing written).
    `run_id`: the new run's id (else a new one). `opening`: events of the run stored with it, from
    the first id it reserves, when it is claimed (else they are not stored).

    Returns why it was refused (and nothing was written), what the thread's UPDATE read (on SQLite
    also when refused, on PostgreSQL only when not), and the inserted run's row.

    Raises:
        sqlalchemy.exc.IntegrityError: A concurrent run, or run of the same key, won the race.
    """
    title = title_from(content) if kind == "message" else ""
    claiming = worker is not None and claim_events is not None
    opened = claiming and bool(opening)
    shape = (
        idempotency_key is not None,
        count_since is not None,
        claiming,
        bool(title),
        user_id is not None,
        opened,
        create_unless is not None and user_id is not None,
    )
    dialect = engine.dialect
    statements = _statements(dialect, shape)
    now = now_utc()
    lease = worker.lease if worker is not None else timedelta(0)
    values: dict[str, Any] = {
        "q_thread_id": thread_id,
        "q_user_id": user_id,
        "q_now": now,
        "q_title": title,
        "q_claim": claim_events,
        "q_key": idempotency_key,
        "q_since": count_since,
        "q_run_id": run_id or str(uuid.uuid4()),
        "q_kind": kind,
        "q_status": "running" if claiming else "queued",
        "q_content": content,
        "q_file_ids": file_ids,
        "q_attempt": 1 if claiming else 0,
        "q_started": now if claiming else None,
        "q_owner": worker.worker_id if worker is not None and claiming else None,
        "q_expires": now + lease if claiming else None,
        "q_lease": lease,
        "q_unless": create_unless,
        "o_types": [event.type for event in opening] if opened else None,
        "o_datas": [event.data for event in opening] if opened else None,
    }
    ran: list[str] = []
    try:
        return await checked_out(engine, statements.mark.sql, _queue_on, statements, values, opening, ran)
    finally:
        executed(*ran)


def _count(value: Any) -> int | None:
    return None if value is None else int(value)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
