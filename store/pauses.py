"""A run's pause in its checkpoint's one trip: the calls held for decisions and their `approval_requested`.

The pause's checkpoint stores the conversation, the run's end, its events, the pending approvals and
the review log's `approval_requested` rows (the webhooks' outbox) in one unit of work on the
compiled path (`checkpoints.py`): one function on SQLite's thread, one statement on PostgreSQL.
A call held already (its id taken in the thread) refuses the unit (`held`): nothing is stored, and
the caller holds the calls the general way (`approvals.insert_pending`), which says whose it is.
The design note is "A pause's trip" in `docs/store.md`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect

from .compiled import Compiled, per_dialect
from .event_rows import NOW, THREAD_ID
from .refusals import Refusal
from .schema import ApprovalRow, ReviewEventRow, metadata

__all__ = (
    "REVIEW_LOG_LOCK",
    "Pause",
    "PendingCall",
    "dump_json",
    "dump_metadata",
    "pause_ctes",
    "pause_work",
    "pending_rows",
    "requested_data",
)

JsonObject = dict[str, object]

_approvals = metadata.tables[ApprovalRow.__tablename__]
_review_events = metadata.tables[ReviewEventRow.__tablename__]
REVIEW_LOG_LOCK = 0x6463_7276_6C67
"""The advisory lock that orders the review log's ids by commit (`approvals.append_review_event`)."""


@dataclass(frozen=True)
class PendingCall:
    """A tool call to hold for a decision."""

    tool_call_id: str
    tool_name: str
    args: JsonObject
    args_schema: JsonObject | None = None
    """The JSON schema of the tool's arguments as the model saw it."""
    outcome: Literal["unknown"] | None = None
    """`unknown`: the call ran before and its process died before it finished; holding it again
    replaces its earlier decision (kept in `Approval.previous`)."""
    metadata: JsonObject | None = None
    """What the tool or the deferral said about the call, for its reviewer (JSON values only)."""
    agent: str | None = None
    """The delegated agent that asked for the call."""
    path: tuple[str, ...] | None = None
    """The chain of agents down to `agent`, outermost first."""
    reviewers: str = "user"
    """Who may decide: `user` (the thread's user) or a role."""
    expires_at: datetime | None = None
    """The deadline the server enforces, if any."""
    on_expiry: JsonObject | None = None
    """What happens at `expires_at` (see `ApprovalRow.on_expiry`); `None` is a rejection."""


@dataclass(frozen=True)
class Pause:
    """The calls a run's last checkpoint holds for decisions, none of them held before (`outcome` None)."""

    calls: Sequence[PendingCall]
    user_id: str
    """The thread's user, as the review log's rows name it."""


def dump_json(value: JsonObject) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def dump_metadata(value: JsonObject | None) -> bytes | None:
    """`value` as stored; `ValueError` for what JSON cannot hold (NaN, infinities), never stored unreadable."""
    if value is None:
        return None
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def pending_rows(
    thread_id: str, run_id: str, calls: Sequence[PendingCall], *, trace_id: str | None, now: datetime
) -> list[dict[str, Any]]:
    """The approvals rows that hold `calls`, pending."""
    return [
        {
            "thread_id": thread_id,
            "tool_call_id": call.tool_call_id,
            "run_id": run_id,
            "tool_name": call.tool_name,
            "args": dump_json(call.args),
            "status": "pending",
            # A microsecond apart, so listing by time keeps the order the model made the calls in.
            "created_at": now + timedelta(microseconds=index),
            "trace_id": trace_id,
            "args_schema": None if call.args_schema is None else dump_json(call.args_schema),
            "outcome": call.outcome,
            "call_metadata": dump_metadata(call.metadata),
            "agent": call.agent,
            "path": None if call.path is None else json.dumps(list(call.path)).encode(),
            "reviewers": call.reviewers,
            "expires_at": call.expires_at,
            "on_expiry": None if call.on_expiry is None else dump_json(call.on_expiry),
        }
        for index, call in enumerate(calls)
    ]


def requested_data(row: dict[str, Any], user_id: str) -> bytes:
    """The `approval_requested` of a call just held (its `pending_rows` row), as `approvals.review_data` gives it."""
    expires_at: datetime | None = row["expires_at"]
    data: JsonObject = {
        "thread_id": row["thread_id"],
        "user_id": user_id,
        "tool_call_id": row["tool_call_id"],
        "run_id": row["run_id"],
        "tool_name": row["tool_name"],
        "args": json.loads(row["args"]),
        "metadata": None if row["call_metadata"] is None else json.loads(row["call_metadata"]),
        "status": "pending",
        "reviewers": row["reviewers"],
        "expires_at": None if expires_at is None else expires_at.isoformat(),
        "override_args": None,
        "reason": None,
        "decided_by": None,
        "decided_role": None,
        "decided_at": None,
        "escalations": [],
        "created_at": row["created_at"].isoformat(),
    }
    return json.dumps(data, separators=(",", ":")).encode()


_HELD_COLUMNS = (
    "tool_call_id",
    "tool_name",
    "args",
    "created_at",
    "args_schema",
    "call_metadata",
    "agent",
    "path",
    "reviewers",
    "expires_at",
    "on_expiry",
)
"""The columns of a held call that vary by call (the thread, the run, the status and the trace do not)."""
_RUN_ID = sa.bindparam("c_run_id", type_=sa.String())
_TRACE_ID = sa.bindparam("c_trace_id", type_=sa.String())


def _rows(pause: Pause, values: dict[str, Any]) -> list[dict[str, Any]]:
    return pending_rows(
        values["c_thread_id"],
        values["c_run_id"],
        pause.calls,
        trace_id=values["c_trace_id"],
        now=values["c_now"],
    )


def _locks(pause: Pause) -> bool:
    # A call its user decides is no reviewer's: its event takes no lock (`append_review_event`).
    return any(call.reviewers != "user" for call in pause.calls)


# -- SQLite: part of the checkpoint's function on the connection's thread -----------------------------


@dataclass(frozen=True)
class _SqliteStatements:
    hold: Compiled
    request: Compiled


@per_dialect
def _sqlite(dialect: Dialect) -> _SqliteStatements:
    hold = (
        sqlite.insert(_approvals)
        .values(
            thread_id=THREAD_ID,
            run_id=_RUN_ID,
            status="pending",
            trace_id=_TRACE_ID,
            **{name: sa.bindparam(f"a_{name}", type_=_approvals.c[name].type) for name in _HELD_COLUMNS},
        )
        .on_conflict_do_nothing(index_elements=list(_approvals.primary_key.columns))
    )
    request = _review_events.insert().values(
        type="approval_requested",
        thread_id=THREAD_ID,
        reviewers=sa.bindparam("v_reviewers", type_=sa.String()),
        data=sa.bindparam("v_data", type_=sa.LargeBinary()),
        created_at=NOW,
    )
    return _SqliteStatements(Compiled.of(hold, dialect), Compiled.of(request, dialect))


def pause_work(
    pause: Pause, values: dict[str, Any], dialect: Dialect
) -> Callable[[sqlite3.Connection, list[str]], Refusal | None]:
    """The pause's statements, to run on a SQLite connection's thread inside the checkpoint's transaction."""
    statements = _sqlite(dialect)
    rows = _rows(pause, values)
    held = [
        statements.hold.parameters(values | {f"a_{name}": row[name] for name in _HELD_COLUMNS})
        for row in rows
    ]
    requested = [
        statements.request.parameters(
            values | {"v_reviewers": row["reviewers"], "v_data": requested_data(row, pause.user_id)}
        )
        for row in rows
    ]

    def run(connection: sqlite3.Connection, ran: list[str]) -> Refusal | None:
        ran.append(statements.hold.sql)
        if connection.executemany(statements.hold.sql, held).rowcount != len(held):
            return "held"
        ran.append(statements.request.sql)
        connection.executemany(statements.request.sql, requested)
        return None

    return run


# -- PostgreSQL: CTEs of the checkpoint's one statement ----------------------------------------------


def _array(name: str, of: Any) -> sa.BindParameter[Any]:
    return sa.bindparam(name, type_=postgresql.ARRAY(of))


def pause_ctes() -> tuple[sa.CTE, sa.CTE]:
    """PostgreSQL: the calls' insert (`held`, returning the calls inserted) and their review log rows
    (`requested`, after the review log's lock when a reviewer decides any of them)."""
    kinds: dict[str, Any] = {
        "tool_call_id": sa.String(),
        "tool_name": sa.String(),
        "args": postgresql.BYTEA(),
        "created_at": sa.DateTime(timezone=True),
        "args_schema": postgresql.BYTEA(),
        "call_metadata": postgresql.BYTEA(),
        "agent": sa.String(),
        "path": postgresql.BYTEA(),
        "reviewers": sa.String(),
        "expires_at": sa.DateTime(timezone=True),
        "on_expiry": postgresql.BYTEA(),
    }
    calls = (
        sa.func.unnest(
            *(_array(f"a_{name}s", kind) for name, kind in kinds.items()),
            _array("v_datas", postgresql.BYTEA()),
        )
        .table_valued(*kinds, "data", with_ordinality="position")
        .render_derived(name="held_calls")
    )
    held = (
        postgresql.insert(_approvals)
        .from_select(
            ["thread_id", "run_id", "status", "trace_id", *kinds],
            sa.select(
                THREAD_ID, _RUN_ID, sa.literal("pending"), _TRACE_ID, *(calls.c[name] for name in kinds)
            ),
        )
        .on_conflict_do_nothing(index_elements=list(_approvals.primary_key.columns))
        .returning(_approvals.c.tool_call_id)
        .cte("held")
    )
    # The lock before the rows take their ids, held to the commit: ids commit in order.
    taken = (
        sa.select(sa.func.pg_advisory_xact_lock(REVIEW_LOG_LOCK).label("taken"))
        .where(sa.bindparam("a_locks", type_=sa.Boolean()))
        .subquery("taken")
    )
    locked = sa.select(sa.func.count().label("locks")).select_from(taken).cte("locked")
    requested = (
        _review_events.insert()
        .from_select(
            ["type", "thread_id", "reviewers", "data", "created_at"],
            sa.select(sa.literal("approval_requested"), THREAD_ID, calls.c.reviewers, calls.c.data, NOW)
            .select_from(calls.join(locked, sa.true()))
            .order_by(calls.c.position),
        )
        .cte("requested")
    )
    return held, requested


def pause_values(pause: Pause | None, values: dict[str, Any]) -> dict[str, Any]:
    """PostgreSQL: the bind values of `pause_ctes` (empty arrays without a pause)."""
    rows = [] if pause is None else _rows(pause, values)
    bound: dict[str, Any] = {f"a_{name}s": [row[name] for row in rows] for name in _HELD_COLUMNS}
    bound["v_datas"] = [] if pause is None else [requested_data(row, pause.user_id) for row in rows]
    bound["a_locks"] = pause is not None and _locks(pause)
    bound["a_count"] = len(rows)
    return bound
