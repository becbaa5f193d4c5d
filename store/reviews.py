"""The review side of approvals: the reviewers' queue, deadlines, escalations and the review events.

A review event (`approval_requested`, `approval_decided`, `approval_escalated`, `approval_expired`)
is written in the transaction of the change it reports: it is both what reviewers follow
(`GET /api/review/events`) and the webhooks' outbox (`store.webhooks`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from .approvals import Approval, JsonObject, ReviewEventType, append_review_event, approval_of, get_approval
from .engine import reader, translate_errors
from .events import LoggedEvent, NewEvent, append_events
from .schema import ApprovalRow, ReviewEventRow, ThreadRow, metadata, status_is
from .threads import touch_thread

__all__ = (
    "QueueCursor",
    "QueueItem",
    "ReviewEvent",
    "Reviews",
)

_approvals = metadata.tables[ApprovalRow.__tablename__]
_threads = metadata.tables[ThreadRow.__tablename__]
_events = metadata.tables[ReviewEventRow.__tablename__]


def _literal(limit: int) -> sa.ColumnElement[int]:
    """`limit` written into the SQL: bound, it makes PostgreSQL estimate a generic plan for a tenth of
    the rows, dearer than a custom one, so every execution is planned again (`docs/review.md`)."""
    return sa.literal_column(str(int(limit)), sa.Integer())


def _ordered(key: tuple[sa.ColumnElement[Any], ...], ascending: bool) -> list[sa.ColumnElement[Any]]:
    return list(key) if ascending else [column.desc() for column in key]


@dataclass(frozen=True)
class QueueItem:
    """A call in the review queue, with whose thread it is in."""

    approval: Approval
    user_id: str
    thread_title: str | None


@dataclass(frozen=True)
class QueueCursor:
    """Where a page of the queue ended: the last item's time (created or decided) and ids."""

    at: datetime
    thread_id: str
    tool_call_id: str


@dataclass(frozen=True)
class ReviewEvent:
    event_id: int
    type: ReviewEventType
    reviewers: str
    data: JsonObject
    created_at: datetime


class Reviews:
    """Queries and changes of the review side of the `approvals` table."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._reader = reader(engine)

    async def queue(
        self,
        roles: Collection[str],
        *,
        status: Literal["pending", "decided"],
        limit: int,
        after: QueueCursor | None = None,
    ) -> list[QueueItem]:
        """Calls for `roles`: pending ones oldest first, decided ones newest decided first.

        Each role's calls are read from its own range of the index, in order, `limit` at most, and
        those ranges merged: `reviewers IN (...)` over several roles would sort every call of them.
        """
        a = _approvals.c
        pending = status == "pending"
        key = (a.created_at if pending else a.decided_at, a.thread_id, a.tool_call_id)
        listed = status_is(a.status, "pending") if pending else ~status_is(a.status, "pending")
        ranges: list[sa.Select[Any]] = []
        for index, role in enumerate(sorted(roles)):
            one = sa.select(_approvals).where(listed, a.reviewers == role)
            if after is not None:
                cursor = sa.tuple_(after.at, after.thread_id, after.tool_call_id)
                one = one.where(sa.tuple_(*key) > cursor if pending else sa.tuple_(*key) < cursor)
            one = one.order_by(*_ordered(key, pending)).limit(_literal(limit))
            # A subquery each: SQLite takes no ORDER BY or LIMIT on a compound's own arms.
            ranges.append(sa.select(one.subquery(f"role_{index}")))
        if not ranges:
            return []
        calls = sa.union_all(*ranges).subquery("calls")
        c = calls.c
        query = (
            sa.select(calls, _threads.c.user_id, _threads.c.title)
            .join(_threads, _threads.c.thread_id == c.thread_id)
            .order_by(
                *_ordered((c.created_at if pending else c.decided_at, c.thread_id, c.tool_call_id), pending)
            )
            .limit(_literal(limit))
        )
        with translate_errors("listing the review queue"):
            async with self._reader.connect() as connection:
                rows = (await connection.execute(query)).mappings().all()
        return [QueueItem(approval_of(row), row["user_id"], row["title"]) for row in rows]

    async def reviews_thread(self, thread_id: str, roles: Collection[str]) -> bool:
        """Whether a reviewer with `roles` has or had a call to decide in the thread."""
        a = _approvals.c
        query = sa.select(sa.literal(1)).where(
            a.thread_id == thread_id,
            sa.or_(a.reviewers.in_(sorted(roles)), a.decided_role.in_(sorted(roles))),
        )
        with translate_errors(f"reading thread {thread_id!r}"):
            async with self._reader.connect() as connection:
                return (await connection.execute(query.limit(1))).first() is not None

    async def due(self, now: datetime, *, limit: int = 100) -> list[Approval]:
        """Pending calls whose deadline has passed, earliest first."""
        a = _approvals.c
        query = (
            sa.select(_approvals)
            .where(status_is(a.status, "pending"), a.expires_at <= now)
            .order_by(a.expires_at)
            .limit(limit)
        )
        with translate_errors("reading passed deadlines"):
            async with self._engine.connect() as connection:
                rows = (await connection.execute(query)).mappings().all()
        return [approval_of(row) for row in rows]

    async def next_deadline(self) -> datetime | None:
        """The earliest deadline of a pending call."""
        a = _approvals.c
        query = sa.select(sa.func.min(a.expires_at)).where(
            status_is(a.status, "pending"), a.expires_at.is_not(None)
        )
        with translate_errors("reading the next deadline"):
            async with self._engine.connect() as connection:
                return (await connection.execute(query)).scalar_one_or_none()

    async def escalate(
        self,
        approval: Approval,
        *,
        to: str,
        expires_after: timedelta | None,
        on_expiry: JsonObject | None,
        now: datetime,
        event: Callable[[Approval], NewEvent],
    ) -> list[LoggedEvent] | None:
        """Hand a call whose deadline passed to the role `to`, with a new deadline.

        Of workers escalating the same call at once, one does it (it answers the events it logged);
        the others, and any call decided or moved meanwhile, answer `None`.
        """
        with translate_errors(f"escalating tool call {approval.tool_call_id!r}"):
            async with self._engine.begin() as connection:
                await touch_thread(connection, approval.thread_id)
                current = await get_approval(connection, approval.thread_id, approval.tool_call_id)
                if (
                    current is None
                    or current.status != "pending"
                    or current.expires_at is None
                    or current.expires_at > now
                    or current.expires_at != approval.expires_at
                ):
                    return None
                expires_at = None if expires_after is None else now + expires_after
                step: JsonObject = {
                    "from": current.reviewers,
                    "to": to,
                    "at": now.isoformat(),
                    "expires_at": None if expires_at is None else expires_at.isoformat(),
                }
                a = _approvals.c
                await connection.execute(
                    _approvals.update()
                    .where(a.thread_id == current.thread_id, a.tool_call_id == current.tool_call_id)
                    .values(
                        reviewers=to,
                        expires_at=expires_at,
                        on_expiry=None if on_expiry is None else json.dumps(on_expiry).encode(),
                        escalations=json.dumps([*(current.escalations or []), step]).encode(),
                    )
                )
                moved = await get_approval(connection, current.thread_id, current.tool_call_id)
                assert moved is not None
                logged = await append_events(connection, current.thread_id, [event(moved)])
                await append_review_event(connection, "approval_escalated", moved)
                return logged

    async def events_after(
        self, roles: Collection[str], after: int, *, limit: int = 500
    ) -> list[ReviewEvent]:
        """Review events for `roles` with an id above `after`, oldest first."""
        e = _events.c
        query = (
            sa.select(_events)
            .where(e.event_id > after, e.reviewers.in_(sorted(roles)))
            .order_by(e.event_id)
            .limit(limit)
        )
        with translate_errors("reading review events"):
            async with self._reader.connect() as connection:
                rows = (await connection.execute(query)).mappings().all()
        return [
            ReviewEvent(
                row["event_id"], row["type"], row["reviewers"], json.loads(row["data"]), row["created_at"]
            )
            for row in rows
        ]

    async def last_event_id(self, roles: Collection[str] | None = None) -> int:
        """The newest review event's id (of those for `roles`, when given); 0 when none."""
        query = sa.select(sa.func.max(_events.c.event_id))
        if roles is not None:
            query = query.where(_events.c.reviewers.in_(sorted(roles)))
        with translate_errors("reading review events"):
            async with self._reader.connect() as connection:
                found = (await connection.execute(query)).scalar_one_or_none()
        return found or 0
