"""What queueing a run binds and reads on either database: the thread's mark, the run's values.

The dialects' modules (`dialects/sqlite.py`, `dialects/postgresql.py`) build their statements and
their trip from these; `queueing.py` picks them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from .compiled import Compiled
from .refusals import Refusal
from .schema import (
    ApprovalRow,
    ConversationRecordRow,
    RunRow,
    ThreadRow,
    UtcDateTime,
    active,
    metadata,
    status_is,
)

__all__ = (
    "RUN_COLUMNS",
    "QueueOutcome",
    "QueueStatements",
    "Refusals",
    "bind",
    "count_of",
    "mark",
    "run_values",
    "text_of",
)

_runs = metadata.tables[RunRow.__tablename__]
_approvals = metadata.tables[ApprovalRow.__tablename__]
_threads = metadata.tables[ThreadRow.__tablename__]
_records = metadata.tables[ConversationRecordRow.__tablename__]


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


RUN_COLUMNS = tuple(_runs.c.keys())


def bind(name: str, type_: Any) -> sa.BindParameter[Any]:
    return sa.bindparam(name, type_=type_)


def mark(
    *, keyed: bool, counting: bool, claiming: bool, titled: bool, owned: bool, creating: str | None
) -> sa.Update | sa.Insert:
    """Mark the thread running (reserving `q_claim` ids), returning what may refuse the run.

    `owned`: only a thread of the user `q_user_id`; another user's is not found. `creating` (a
    dialect's name): the thread is created when missing (an upsert, `creating_thread`).
    """
    threads = _threads.c
    values: dict[str, Any] = {"updated_at": bind("q_now", UtcDateTime()), "status": "running"}
    if titled:
        values["title"] = sa.case((threads.title == "", bind("q_title", sa.String())), else_=threads.title)
    if claiming:
        values["last_event_id"] = threads.last_event_id + bind("q_claim", sa.BigInteger())
    # SQLAlchemy renders RETURNING's columns unqualified, which a subquery would take for its own
    # table's: the updated row is named in full, and the subqueries' tables get aliases.
    this_thread = sa.literal_column("threads.thread_id", sa.String())
    runs = _runs.alias("other_runs")
    key: sa.ColumnElement[Any] = sa.null()
    if keyed:
        key = (
            sa.select(runs.c.run_id)
            .where(runs.c.thread_id == this_thread, runs.c.idempotency_key == bind("q_key", sa.String()))
            .scalar_subquery()
        )
    # Literals, not a list: a list would be an expanding parameter, which compiled SQL cannot hold.
    active_run = sa.exists().where(runs.c.thread_id == this_thread, active(runs.c.status))
    approvals = _approvals.alias("pending_approvals")
    pending = sa.exists().where(
        approvals.c.thread_id == this_thread, status_is(approvals.c.status, "pending")
    )
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
                runs.c.created_at >= bind("q_since", UtcDateTime()),
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
        active_run.label("active"),
        pending.label("pending"),
        sent.label("sent"),
        revision.label("revision"),
    )
    if creating is not None:
        return creating_thread(creating, values, claiming=claiming, titled=titled).returning(*returned)
    found = threads.thread_id == bind("q_thread_id", sa.String())
    if owned:
        found = sa.and_(found, threads.user_id == bind("q_user_id", sa.String()))
    return _threads.update().where(found).values(**values).returning(*returned)


def creating_thread(dialect: str, marking: dict[str, Any], *, claiming: bool, titled: bool) -> sa.Insert:
    """The thread `q_thread_id` of `q_user_id` inserted running, or marked as `marking` says if it
    exists (and is theirs); neither when `q_unless` names a thread of that user's own (nothing
    returned: `no thread`). SQLite and PostgreSQL spell the upsert alike."""
    threads = _threads.c
    user: Any = bind("q_user_id", sa.String())
    now: Any = bind("q_now", UtcDateTime())
    row: dict[str, Any] = {
        "thread_id": bind("q_thread_id", sa.String()),
        "user_id": user,
        "title": bind("q_title", sa.String()) if titled else sa.literal(""),
        "status": sa.literal("running"),
        "created_at": now,
        "updated_at": now,
        "last_event_id": bind("q_claim", sa.BigInteger()) if claiming else sa.literal(0, sa.BigInteger()),
        "checkpoint_event_id": sa.literal(0, sa.BigInteger()),
    }
    own = _threads.alias("own_threads")
    unless_owned = ~sa.exists().where(own.c.thread_id == bind("q_unless", sa.String()), own.c.user_id == user)
    source = sa.select(*(value.label(name) for name, value in row.items())).where(unless_owned)
    insert = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(_threads)
    return insert.from_select(list(row), source).on_conflict_do_update(
        index_elements=[threads.thread_id], set_=marking, where=threads.user_id == user
    )


def run_values(*, postgres: bool, claiming: bool) -> dict[str, Any]:
    expires: Any = bind("q_expires", UtcDateTime())
    if postgres and claiming:
        # The database's clock, as every lease (see `leases.py`).
        expires = sa.func.statement_timestamp(type_=UtcDateTime()) + sa.cast(
            bind("q_lease", sa.Interval()), sa.Interval()
        )
    return {
        "run_id": bind("q_run_id", sa.String()),
        "thread_id": bind("q_thread_id", sa.String()),
        "kind": bind("q_kind", sa.String()),
        "status": bind("q_status", sa.String()),
        "content": bind("q_content", sa.Text()),
        "file_ids": bind("q_file_ids", sa.Text()),
        "idempotency_key": bind("q_key", sa.String()),
        "attempt": bind("q_attempt", sa.Integer()),
        "checkpoints": 0,
        "created_at": bind("q_now", UtcDateTime()),
        "started_at": bind("q_started", UtcDateTime()),
        "lease_owner": bind("q_owner", sa.String()),
        "lease_expires_at": expires,
    }


@dataclass(frozen=True)
class QueueStatements:
    """A queueing's compiled statements for one dialect and shape."""

    mark: Compiled
    """SQLite: the thread's UPDATE. PostgreSQL: both, one statement (the opening events too)."""
    insert: Compiled | None
    event: Compiled | None
    """SQLite: one opening event."""


QueueOutcome = tuple[Refusal | None, Refusals | None, dict[str, Any] | None]
"""Why the run was refused, what the thread's UPDATE read, and the inserted run's row."""


def count_of(value: Any) -> int | None:
    return None if value is None else int(value)


def text_of(value: Any) -> str | None:
    return None if value is None else str(value)
