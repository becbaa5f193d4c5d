"""Approvals: tool calls a paused run waits on, and the decisions humans give them.

pydantic-ai's history keeps only the outcome of a decision; this table keeps who decided, when,
the original and the edited arguments and the reason.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .engine import insert_new, reader, translate_errors
from .errors import AlreadyDecided, NotFound
from .events import LoggedEvent, NewEvent, append_events
from .ledger import mark_retry
from .pauses import REVIEW_LOG_LOCK, PendingCall, dump_json, dump_metadata, pending_rows
from .runs import insert_run
from .schema import ApprovalRow, ApprovalStatus, ReviewEventRow, ThreadRow, metadata, now_utc, status_is
from .threads import touch_thread
from .tracing import traced

__all__ = (
    "Approval",
    "Approvals",
    "Decision",
    "PendingCall",
    "ReviewEventType",
    "append_review_event",
    "approval_of",
    "get_approval",
    "insert_pending",
    "review_data",
)

_approvals = metadata.tables[ApprovalRow.__tablename__]
_threads = metadata.tables[ThreadRow.__tablename__]
_review_events = metadata.tables[ReviewEventRow.__tablename__]

JsonObject = dict[str, object]


@dataclass(frozen=True)
class Approval:
    thread_id: str
    tool_call_id: str
    run_id: str
    tool_name: str
    args: JsonObject
    status: ApprovalStatus
    override_args: JsonObject | None
    reason: str | None
    decided_by: str | None
    decided_at: datetime | None
    resume_run_id: str | None
    created_at: datetime
    trace_id: str | None = None
    """The trace of the run that paused for the call (32 hex digits), when it was traced."""
    args_schema: JsonObject | None = None
    """The JSON schema of the tool's arguments as the model saw it; `None` for calls held before it was kept."""
    outcome: Literal["unknown"] | None = None
    """`unknown`: an earlier attempt started the call and never finished; nobody knows whether it acted."""
    previous: JsonObject | None = None
    """The decision the call had before its outcome became unknown (`status`, `decided_by`, `decided_at`,
    `override_args`, `reason`)."""
    metadata: JsonObject | None = None
    """What the tool or the deferral said about the call, for its reviewer."""
    agent: str | None = None
    """The delegated agent that asked for the call."""
    path: tuple[str, ...] | None = None
    """The chain of agents down to `agent`, outermost first."""
    reviewers: str = "user"
    """Who may decide: `user` (the thread's user) or a role."""
    expires_at: datetime | None = None
    """The deadline the server enforces, if any."""
    on_expiry: JsonObject | None = None
    """What happens at `expires_at`: `None` or `{"action": "reject"}`, or an escalation."""
    decided_role: str | None = None
    """The role the reviewer decided with (`None`: the thread's user, or the server)."""
    escalations: list[JsonObject] | None = None
    """The escalations the call went through, oldest first."""


@dataclass(frozen=True)
class Decision:
    """What deciding a call did."""

    approval: Approval
    resume_run_id: str | None
    """The run the decision started, when it completed its run's set of decisions."""
    repeated: bool
    """The call had this decision already; nothing changed."""
    events: list[LoggedEvent]
    """The events the decision logged (its `approval_decided`), to publish to live followers."""


class Approvals:
    """The `approvals` table."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._reader = reader(engine)

    async def get(self, thread_id: str, tool_call_id: str) -> Approval:
        with translate_errors(f"reading tool call {tool_call_id!r}"):
            async with self._reader.connect() as connection:
                approval = await _get(connection, thread_id, tool_call_id)
        if approval is None:
            raise NotFound(f"no tool call {tool_call_id!r} awaits a decision in thread {thread_id!r}")
        return approval

    @traced("list_approvals")
    async def list(
        self,
        *,
        thread_id: str | None = None,
        user_id: str | None = None,
        run_id: str | None = None,
        status: ApprovalStatus | None = None,
    ) -> list[Approval]:
        """Approvals, oldest first, filtered by thread, owner, paused run and status."""
        query = sa.select(_approvals).order_by(_approvals.c.created_at, _approvals.c.tool_call_id)
        if thread_id is not None:
            query = query.where(_approvals.c.thread_id == thread_id)
        if run_id is not None:
            query = query.where(_approvals.c.run_id == run_id)
        if status is not None:
            query = query.where(status_is(_approvals.c.status, status))
        if user_id is not None:
            query = query.join(_threads, _threads.c.thread_id == _approvals.c.thread_id).where(
                _threads.c.user_id == user_id
            )
        with translate_errors("listing approvals"):
            async with self._reader.connect() as connection:
                rows = (await connection.execute(query)).mappings().all()
        return [_approval(row) for row in rows]

    @traced("decide")
    async def decide(
        self,
        thread_id: str,
        tool_call_id: str,
        *,
        decision: Literal["approved", "rejected"],
        decided_by: str,
        override_args: JsonObject | None = None,
        reason: str | None = None,
        event: Callable[[Approval], NewEvent],
        check: Callable[[Approval], None] | None = None,
        as_reviewer: bool = False,
        also: Callable[[AsyncConnection, Approval], Awaitable[None]] | None = None,
    ) -> Decision:
        """Record a decision, its `approval_decided` event and, if it completes the set, queue the resume.

        One transaction, serialized per thread: of concurrent decisions, exactly one completes the
        set and queues exactly one resume run.

        Raises:
            NotFound: No such tool call waits in that thread.
            AlreadyDecided: The call was given the opposite decision.

        `check` sees the call as it is inside the transaction, before anything changes, and may raise
        to refuse the decision (a reviewer without the call's role); `as_reviewer` keeps the call's role
        (its `reviewers`) with the decision;
        `also` runs in the transaction once the decision is recorded (an outbox row).
        """
        with translate_errors(f"deciding tool call {tool_call_id!r}"):
            async with self._engine.begin() as connection:
                await touch_thread(connection, thread_id)
                current = await _get(connection, thread_id, tool_call_id)
                if current is None:
                    raise NotFound(f"no tool call {tool_call_id!r} awaits a decision in thread {thread_id!r}")
                if check is not None:
                    check(current)
                if current.status != "pending":
                    if current.status != decision:
                        raise AlreadyDecided(f"tool call {tool_call_id!r} was already {current.status}")
                    return Decision(current, current.resume_run_id, repeated=True, events=[])
                await connection.execute(
                    _approvals.update()
                    .where(_approvals.c.thread_id == thread_id, _approvals.c.tool_call_id == tool_call_id)
                    .values(
                        status=decision,
                        override_args=None if override_args is None else _dump(override_args),
                        reason=reason,
                        decided_by=decided_by,
                        decided_at=now_utc(),
                        decided_role=current.reviewers if as_reviewer else None,
                    )
                )
                if current.outcome == "unknown" and decision == "approved":
                    # The reviewer decided to run the call again, under the same idempotency key.
                    await mark_retry(connection, thread_id, tool_call_id)
                decided = await _get(connection, thread_id, tool_call_id)
                assert decided is not None
                logged = await append_events(connection, thread_id, [event(decided)])
                if also is not None:
                    await also(connection, decided)
                still_pending = (
                    await connection.execute(
                        sa.select(sa.func.count())
                        .select_from(_approvals)
                        .where(
                            _approvals.c.thread_id == thread_id,
                            _approvals.c.run_id == current.run_id,
                            status_is(_approvals.c.status, "pending"),
                        )
                    )
                ).scalar_one()
                if still_pending:
                    return Decision(decided, None, repeated=False, events=logged)
                resume = await insert_run(connection, thread_id, kind="resume")
                await connection.execute(
                    _approvals.update()
                    .where(_approvals.c.thread_id == thread_id, _approvals.c.tool_call_id == tool_call_id)
                    .values(resume_run_id=resume.run_id)
                )
                return Decision(decided, resume.run_id, repeated=False, events=logged)


async def insert_pending(
    connection: AsyncConnection,
    thread_id: str,
    run_id: str,
    calls: Sequence[PendingCall],
    *,
    trace_id: str | None = None,
) -> None:
    """Hold `calls` for decisions, inside the caller's unit of work; a call held already is kept.

    A call whose outcome became unknown is held again: its earlier decision moves to `previous`.
    `trace_id` is the trace of the run that pauses, kept on each approval row.
    """
    if not calls:
        return
    rows = pending_rows(thread_id, run_id, calls, trace_id=trace_id, now=now_utc())
    await connection.execute(insert_new(connection.dialect.name, _approvals), rows)
    for call in calls:
        if call.outcome == "unknown":
            await _hold_again(connection, thread_id, run_id, call, trace_id)
    for call in calls:
        held = await _get(connection, thread_id, call.tool_call_id)
        if held is not None and held.status == "pending":
            await append_review_event(connection, "approval_requested", held)


async def _hold_again(
    connection: AsyncConnection, thread_id: str, run_id: str, call: PendingCall, trace_id: str | None
) -> None:
    earlier = await _get(connection, thread_id, call.tool_call_id)
    if earlier is None or earlier.status == "pending":
        return
    previous: JsonObject = {
        "status": earlier.status,
        "decided_by": earlier.decided_by,
        "decided_at": None if earlier.decided_at is None else earlier.decided_at.isoformat(),
        "override_args": earlier.override_args,
        "reason": earlier.reason,
    }
    await connection.execute(
        _approvals.update()
        .where(_approvals.c.thread_id == thread_id, _approvals.c.tool_call_id == call.tool_call_id)
        .values(
            run_id=run_id,
            status="pending",
            outcome="unknown",
            previous=_dump(previous),
            override_args=None,
            reason=None,
            decided_by=None,
            decided_at=None,
            resume_run_id=None,
            trace_id=trace_id,
            call_metadata=_dump_metadata(call.metadata),
            reviewers=call.reviewers,
            expires_at=call.expires_at,
            on_expiry=None if call.on_expiry is None else _dump(call.on_expiry),
            decided_role=None,
            escalations=None,
        )
    )


async def _get(connection: AsyncConnection, thread_id: str, tool_call_id: str) -> Approval | None:
    row = (
        (
            await connection.execute(
                sa.select(_approvals).where(
                    _approvals.c.thread_id == thread_id, _approvals.c.tool_call_id == tool_call_id
                )
            )
        )
        .mappings()
        .one_or_none()
    )
    return None if row is None else _approval(row)


_dump = dump_json
_dump_metadata = dump_metadata


def _approval(row: RowMapping) -> Approval:
    return Approval(
        thread_id=row["thread_id"],
        tool_call_id=row["tool_call_id"],
        run_id=row["run_id"],
        tool_name=row["tool_name"],
        args=json.loads(row["args"]),
        status=row["status"],
        override_args=None if row["override_args"] is None else json.loads(row["override_args"]),
        reason=row["reason"],
        decided_by=row["decided_by"],
        decided_at=row["decided_at"],
        resume_run_id=row["resume_run_id"],
        created_at=row["created_at"],
        trace_id=row["trace_id"],
        args_schema=None if row["args_schema"] is None else json.loads(row["args_schema"]),
        outcome=row["outcome"],
        previous=None if row["previous"] is None else json.loads(row["previous"]),
        metadata=None if row["call_metadata"] is None else json.loads(row["call_metadata"]),
        agent=row["agent"],
        path=None if row["path"] is None else tuple(json.loads(row["path"])),
        reviewers=row["reviewers"],
        expires_at=row["expires_at"],
        on_expiry=None if row["on_expiry"] is None else json.loads(row["on_expiry"]),
        decided_role=row["decided_role"],
        escalations=None if row["escalations"] is None else json.loads(row["escalations"]),
    )


get_approval = _get
"""The call `tool_call_id` of a thread read in the caller's transaction (`store.reviews`)."""
approval_of = _approval
"""An approval from its row (`store.reviews`)."""


ReviewEventType = Literal["approval_requested", "approval_decided", "approval_escalated", "approval_expired"]


def review_data(approval: Approval, user_id: str) -> JsonObject:
    """The approval as a review event and a webhook carry it."""
    return {
        "thread_id": approval.thread_id,
        "user_id": user_id,
        "tool_call_id": approval.tool_call_id,
        "run_id": approval.run_id,
        "tool_name": approval.tool_name,
        "args": approval.args,
        "metadata": approval.metadata,
        "status": approval.status,
        "reviewers": approval.reviewers,
        "expires_at": None if approval.expires_at is None else approval.expires_at.isoformat(),
        "override_args": approval.override_args,
        "reason": approval.reason,
        "decided_by": approval.decided_by,
        "decided_role": approval.decided_role,
        "decided_at": None if approval.decided_at is None else approval.decided_at.isoformat(),
        "escalations": approval.escalations or [],
        "created_at": approval.created_at.isoformat(),
    }


async def append_review_event(connection: AsyncConnection, type: ReviewEventType, approval: Approval) -> None:
    """Log a change of `approval` for reviewers and webhooks, inside the caller's unit of work.

    On PostgreSQL the ids of events reviewers follow are taken one transaction at a time (a lock held
    to the commit), so they commit in order: a follower that has read id N has seen every lower id
    for its roles that will ever exist. A call its user decides is no reviewer's: its events (read
    only by the webhooks' sender, which looks back past late commits) take no lock, so customers'
    pauses and decisions never wait on each other.
    """
    if connection.dialect.name == "postgresql" and approval.reviewers != "user":
        # Without it a lower id could commit after a higher one a poller already read past. SQLite
        # has one writer at a time anyway.
        await connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": REVIEW_LOG_LOCK})
    user_id = (
        await connection.execute(
            sa.select(_threads.c.user_id).where(_threads.c.thread_id == approval.thread_id)
        )
    ).scalar_one()
    await connection.execute(
        _review_events.insert().values(
            type=type,
            thread_id=approval.thread_id,
            reviewers=approval.reviewers,
            data=json.dumps(review_data(approval, user_id), separators=(",", ":")).encode(),
            created_at=now_utc(),
        )
    )
