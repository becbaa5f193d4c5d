"""Deciding a pending tool call: validation of edited arguments, the decision, its event."""

from __future__ import annotations

from typing import Literal

from store import Approval, Database, Decision, NewEvent
from stream import ApprovalDecided, event_data

from .eventlog import Publisher, stored_events
from .tools import validate_args

__all__ = ("decide",)


async def decide(
    db: Database,
    thread_id: str,
    tool_call_id: str,
    *,
    decision: Literal["approved", "rejected"],
    decided_by: str,
    override_args: dict[str, object] | None = None,
    reason: str | None = None,
    publish: Publisher | None = None,
) -> Decision:
    """Approve (possibly with edited arguments) or reject a pending call.

    The decision that completes its run's set queues the resume run (`Decision.resume_run_id`);
    the caller drives it with `run_step`.

    Raises:
        store.NotFound: No such call waits in the thread.
        store.AlreadyDecided: The call was given the opposite decision.
        InvalidArguments: `override_args` do not fit the tool's schema.
    """
    if decision == "approved" and override_args is not None:
        pending = await db.approvals.get(thread_id, tool_call_id)
        override_args = validate_args(pending.tool_name, override_args)

    def event(approval: Approval) -> NewEvent:
        decided = ApprovalDecided(
            run_id=approval.run_id,
            tool_call_id=approval.tool_call_id,
            decision=decision,
            decided_by=decided_by,
            override_args=approval.override_args,
            reason=approval.reason,
        )
        return NewEvent(decided.run_id, decided.type, event_data(decided))

    result = await db.approvals.decide(
        thread_id,
        tool_call_id,
        decision=decision,
        decided_by=decided_by,
        override_args=override_args if decision == "approved" else None,
        reason=reason if decision == "rejected" else None,
        event=event,
    )
    if publish is not None and result.events:
        publish(thread_id, stored_events(result.events))
    return result
