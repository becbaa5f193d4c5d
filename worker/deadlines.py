"""The deadlines of held calls, enforced by whatever worker is alive.

Every `poll_seconds` (and at start, for deadlines that passed while no server ran) a worker reads the
pending calls whose `expires_at` has passed, by an index, and rejects each (decided by `system`) or
escalates it. Each change is one transaction serialized per thread that re-checks the call is still
pending and due: of workers enforcing the same deadline at once, exactly one changes it. A rejection
that completes its run's set starts the resume run, as any decision does.
"""

from __future__ import annotations

import logging
from datetime import datetime

from agent import (
    Escalate,
    NotDue,
    Publisher,
    decide,
    expiry_from_json,
    expiry_json,
    expiry_reason,
    stored_events,
)
from store import AlreadyDecided, Approval, Database, NewEvent, NotFound, now_utc
from stream import ApprovalEscalated, event_data

from .loops import Periodic
from .runner import Runner

__all__ = ("Deadlines",)

logger = logging.getLogger(__name__)


class Deadlines:
    """Rejects or escalates held calls whose deadline passed; `start` keeps doing so in a task."""

    def __init__(
        self,
        db: Database,
        runner: Runner | None,
        *,
        publish: Publisher | None = None,
        poll_seconds: float = 1.0,
    ) -> None:
        self._db = db
        self._runner = runner
        self._publish = publish
        self._rounds = Periodic(self.sweep, seconds=poll_seconds, name="enforcing deadlines")

    async def start(self) -> None:
        """Enforce what is due now, then every `poll_seconds`."""
        await self._rounds.once()
        self._rounds.start(wait_first=True)

    async def aclose(self) -> None:
        await self._rounds.aclose()

    async def sweep(self, now: datetime | None = None) -> int:
        """Enforce every deadline passed by `now`; return how many this worker enforced."""
        moment = now_utc() if now is None else now
        done = 0
        for approval in await self._db.reviews.due(moment):
            if await self._enforce(approval, moment):
                done += 1
        return done

    async def _enforce(self, approval: Approval, now: datetime) -> bool:
        expiry = expiry_from_json(approval.on_expiry)
        if isinstance(expiry, Escalate):
            return await self._escalate(approval, expiry, now)
        try:
            decided = await decide(
                self._db,
                approval.thread_id,
                approval.tool_call_id,
                decision="rejected",
                decided_by="system",
                reason=expiry_reason(approval, now),
                publish=self._publish,
                deadline=now,
            )
        except (NotDue, NotFound, AlreadyDecided):
            return False  # another worker was first, or the call was decided or deleted meanwhile
        if decided.repeated:
            return False
        logger.info("tool call %s expired and was rejected", approval.tool_call_id)
        if decided.resume_run_id is not None and self._runner is not None:
            self._runner.submit(decided.resume_run_id)
        return True

    async def _escalate(self, approval: Approval, expiry: Escalate, now: datetime) -> bool:
        def event(moved: Approval) -> NewEvent:
            escalated = ApprovalEscalated(
                run_id=moved.run_id,
                tool_call_id=moved.tool_call_id,
                reviewers=moved.reviewers,
                expires_at=None if moved.expires_at is None else moved.expires_at.isoformat(),
            )
            return NewEvent(moved.run_id, escalated.type, event_data(escalated))

        try:
            logged = await self._db.reviews.escalate(
                approval,
                to=expiry.to,
                expires_after=expiry.expires_after,
                on_expiry=expiry_json(expiry.on_expiry),
                now=now,
                event=event,
            )
        except NotFound:
            return False
        if logged is None:
            return False
        logger.info("tool call %s escalated to %s", approval.tool_call_id, expiry.to)
        if self._publish is not None:
            self._publish(approval.thread_id, stored_events(logged))
        return True
