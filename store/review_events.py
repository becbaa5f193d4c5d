"""Review events: changes of the review queue, logged in the transaction of the change."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Literal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from .schema import ReviewEventRow, ThreadRow, metadata, now_utc

if TYPE_CHECKING:
    from .approvals import Approval

JsonObject = dict[str, object]

__all__ = ("ReviewEventType", "append_review_event", "review_data")

_threads = metadata.tables[ThreadRow.__tablename__]
_events = metadata.tables[ReviewEventRow.__tablename__]

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
    """Log a change of `approval` for reviewers and webhooks, inside the caller's unit of work."""
    user_id = (
        await connection.execute(
            sa.select(_threads.c.user_id).where(_threads.c.thread_id == approval.thread_id)
        )
    ).scalar_one()
    await connection.execute(
        _events.insert().values(
            type=type,
            reviewers=approval.reviewers,
            data=json.dumps(review_data(approval, user_id), separators=(",", ":")).encode(),
            created_at=now_utc(),
        )
    )
