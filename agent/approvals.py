"""Holding tool calls for decisions, and deciding them: validation of edited arguments, the
decision, its event."""

from __future__ import annotations

import inspect
import secrets
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from opentelemetry import context, trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.messages import ToolCallPart
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from store import Approval, Database, Decision, NewEvent, NotFound, PendingCall, append_review_event
from stream import ApprovalDecided, ApprovalRequired, event_data
from stream import PendingCall as PendingCallEvent

from .app import ApprovalReview, ReviewPolicy
from .arguments import InvalidArguments, validate_args
from .eventlog import Publisher, stored_events
from .ledger import OUTCOME_UNKNOWN
from .outputs import call_metadata
from .review import Review, check_decider, expiry_json
from .withdrawals import EventTags

__all__ = (
    "DELEGATED",
    "NotDue",
    "approval_required",
    "call_args",
    "decide",
    "denial",
    "encode_calls",
    "held_calls",
    "reviewed_calls",
    "stored_decisions",
)

DELEGATED = "durable_chat_delegated"
"""The key of `ApprovalRequired.metadata` under which a delegating call lists its sub-run's held calls."""


def call_args(call: ToolCallPart) -> dict[str, object]:
    """A call's arguments as an object; arguments that are no JSON object as `{"_raw": their text}`."""
    try:
        return call.args_as_dict()
    except ValueError:
        return {"_raw": call.args_as_json_str()}


def held_calls(
    requests: DeferredToolRequests,
    schemas: Mapping[str, dict[str, object]],
    *,
    agent: str | None = None,
    path: Sequence[str] | None = None,
) -> list[PendingCall]:
    """The calls a paused run holds for decisions, as the approvals table keeps them: with the argument
    schema the model saw (`schemas`, by tool) and what the tool said of each (its metadata).

    A call that delegated to an agent which paused stands for that agent's held calls (`DELEGATED`):
    those are held in its place. `agent` and `path` name the agent whose calls these are.
    """
    held: list[PendingCall] = []
    for call in [*requests.approvals, *requests.calls]:
        metadata = requests.metadata.get(call.tool_call_id) or {}
        if DELEGATED in metadata:
            held.extend(_decoded(item) for item in metadata[DELEGATED])
            continue
        held.append(
            PendingCall(
                call.tool_call_id,
                call.tool_name,
                call_args(call),
                args_schema=schemas.get(call.tool_name),
                outcome="unknown" if OUTCOME_UNKNOWN in metadata else None,
                metadata=call_metadata(requests.metadata.get(call.tool_call_id)),
                agent=agent,
                path=None if path is None else tuple(path),
            )
        )
    return held


def encode_calls(calls: Sequence[PendingCall]) -> list[dict[str, object]]:
    """`calls` as JSON, to carry in a delegating call's `ApprovalRequired` metadata."""
    return [
        {
            "tool_call_id": call.tool_call_id,
            "tool_name": call.tool_name,
            "args": call.args,
            "args_schema": call.args_schema,
            "outcome": call.outcome,
            "metadata": call.metadata,
            "agent": call.agent,
            "path": None if call.path is None else list(call.path),
        }
        for call in calls
    ]


def _decoded(item: Mapping[str, Any]) -> PendingCall:
    path = item.get("path")
    return PendingCall(
        item["tool_call_id"],
        item["tool_name"],
        item["args"],
        args_schema=item.get("args_schema"),
        outcome="unknown" if item.get("outcome") == "unknown" else None,
        metadata=item.get("metadata"),
        agent=item.get("agent"),
        path=None if path is None else tuple(path),
    )


async def stored_decisions(
    db: Database, thread_id: str, requests: DeferredToolRequests
) -> DeferredToolResults:
    """The stored decisions on the calls a run (or a delegated agent's run) resumes, as pydantic-ai takes them.

    A call that delegated to an agent which paused is approved: it runs again, and its agent resumes
    with the decisions on its own calls.
    """
    waiting = {call.tool_call_id for call in requests.approvals}
    results = DeferredToolResults()
    for approval in await db.approvals.list(thread_id=thread_id):
        if approval.tool_call_id not in waiting:
            continue
        if approval.status == "approved":
            results.approvals[approval.tool_call_id] = ToolApproved(override_args=approval.override_args)
        elif approval.status == "rejected":
            results.approvals[approval.tool_call_id] = ToolDenied(denial(approval.reason, approval.outcome))
    for call in requests.approvals:
        if DELEGATED in (requests.metadata.get(call.tool_call_id) or {}):
            results.approvals[call.tool_call_id] = ToolApproved()
    return results


def approval_required(tags: EventTags, calls: Sequence[PendingCall]) -> ApprovalRequired:
    """The event that says the run of `tags` paused for `calls`."""
    return ApprovalRequired(
        **tags,
        approvals=[
            PendingCallEvent(
                tool_call_id=call.tool_call_id,
                tool_name=call.tool_name,
                args=call.args,
                outcome=call.outcome,
                metadata=call.metadata,
                agent=call.agent,
                path=None if call.path is None else list(call.path),
                reviewers=call.reviewers,
                expires_at=None if call.expires_at is None else call.expires_at.isoformat(),
            )
            for call in calls
        ],
    )


async def reviewed_calls(
    policy: ReviewPolicy | None,
    calls: Sequence[PendingCall],
    *,
    thread_id: str,
    user_id: str,
    engine: AsyncEngine,
    now: datetime,
) -> list[PendingCall]:
    """`calls` with who decides each and by when, as `policy` says (all the user's without one)."""
    if policy is None:
        return list(calls)
    reviewed: list[PendingCall] = []
    for call in calls:
        review = policy(
            ApprovalReview(
                thread_id=thread_id,
                user_id=user_id,
                tool_call_id=call.tool_call_id,
                tool_name=call.tool_name,
                args=call.args,
                engine=engine,
                metadata=call.metadata,
            )
        )
        if inspect.isawaitable(review):
            review = await review
        if not isinstance(review, Review):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"the review policy answered {review!r} for {call.tool_name!r}, not a Review")
        reviewed.append(
            replace(
                call,
                reviewers=review.by,
                expires_at=None if review.expires_after is None else now + review.expires_after,
                on_expiry=expiry_json(review.on_expiry),
            )
        )
    return reviewed


tracer = trace.get_tracer("durable_chat.agent")


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
    reviewer_roles: Collection[str] | None = None,
    deadline: datetime | None = None,
) -> Decision:
    """Approve (possibly with edited arguments) or reject a pending call.

    The decision that completes its run's set queues the resume run (`Decision.resume_run_id`);
    the caller drives it with `run_step`. The thread's user decides (`reviewer_roles` None) only the
    calls the user reviews; a reviewer only calls for one of `reviewer_roles`; the server (`deadline`,
    the time it enforces) only a pending call whose deadline is past. It is traced in an `approval` span of the paused run's
    trace, and its `approval_decided` event carries that trace's id.

    Raises:
        store.NotFound: No such call waits in the thread.
        store.AlreadyDecided: The call was given the opposite decision.
        InvalidArguments: `override_args` do not fit the tool's schema as the model saw it, or the
            call's outcome is unknown (it can only run again as it was).
        ReviewerRequired: The user decided a call a reviewer decides.
        NotDue: `deadline` is given and the call is decided or not due (another worker was first).
    """
    pending = await db.approvals.get(thread_id, tool_call_id)
    attributes = {
        "durable_chat.thread_id": thread_id,
        "durable_chat.run_id": pending.run_id,
        "durable_chat.tool_call_id": tool_call_id,
        "durable_chat.tool_name": pending.tool_name,
        "durable_chat.approval.decision": decision,
        "durable_chat.approval.edited": override_args is not None,
    }
    with tracer.start_as_current_span("approval", _in_trace(pending.trace_id), attributes=attributes) as span:
        result = await _decide(
            db,
            pending,
            decision,
            decided_by=decided_by,
            override_args=override_args,
            reason=reason,
            who=_Who(reviewer_roles, deadline),
        )
        span.set_attribute("durable_chat.approval.repeated", result.repeated)
        if result.resume_run_id is not None:
            span.set_attribute("durable_chat.approval.resume_run_id", result.resume_run_id)
    if publish is not None and result.events:
        publish(thread_id, stored_events(result.events))
    return result


async def _decide(
    db: Database,
    pending: Approval,
    decision: Literal["approved", "rejected"],
    *,
    decided_by: str,
    override_args: dict[str, object] | None,
    reason: str | None,
    who: _Who,
) -> Decision:
    if decision == "approved" and override_args is not None:
        if pending.outcome == "unknown":
            # It runs again under the same idempotency key: an API that acted the first time answers
            # with what it did then, whatever the new arguments say.
            raise InvalidArguments(
                pending.tool_name,
                [{"loc": [], "msg": "a call whose outcome is unknown runs again as it was, or not at all"}],
            )
        override_args = validate_args(pending.tool_name, override_args, pending.args_schema)

    def event(approval: Approval) -> NewEvent:
        decided = ApprovalDecided(
            run_id=approval.run_id,
            trace_id=approval.trace_id,
            tool_call_id=approval.tool_call_id,
            decision=decision,
            decided_by=decided_by,
            override_args=approval.override_args,
            reason=approval.reason,
            decided_at=None if approval.decided_at is None else approval.decided_at.isoformat(),
            decided_role=approval.decided_role,
        )
        return NewEvent(decided.run_id, decided.type, event_data(decided))

    async def logged(connection: AsyncConnection, approval: Approval) -> None:
        await append_review_event(
            connection, "approval_expired" if who.deadline is not None else "approval_decided", approval
        )

    return await db.approvals.decide(
        pending.thread_id,
        pending.tool_call_id,
        decision=decision,
        decided_by=decided_by,
        override_args=override_args if decision == "approved" else None,
        reason=reason if decision == "rejected" else None,
        event=event,
        check=who.check,
        as_reviewer=who.roles is not None,
        also=logged,
    )


class NotDue(Exception):
    """The server found the call decided, or its deadline moved: nothing to enforce."""


@dataclass(frozen=True)
class _Who:
    roles: Collection[str] | None
    deadline: datetime | None

    def check(self, approval: Approval) -> None:
        if self.deadline is not None:
            if (
                approval.status != "pending"
                or approval.expires_at is None
                or approval.expires_at > self.deadline
            ):
                raise NotDue(f"tool call {approval.tool_call_id!r} is not due")
            return
        check_decider(self.roles, _not_found)(approval)


def _not_found(approval: Approval) -> Exception:
    return NotFound(
        f"no tool call {approval.tool_call_id!r} awaits a decision in thread {approval.thread_id!r}"
    )


def _in_trace(trace_id: str | None) -> context.Context | None:
    """A context whose parent is a placeholder in the trace `trace_id`, so a span started in it joins that trace.

    The paused run's span ended long ago and its id was not kept: the approval span hangs under a
    remote parent that is never exported, and `durable-chat trace` shows it as a root of the trace.
    """
    if trace_id is None:
        return None
    parent = SpanContext(
        trace_id=int(trace_id, 16),
        span_id=secrets.randbits(64) or 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


def denial(reason: str | None, outcome: str | None) -> str:
    """What the model is told of a rejected call (a decision `reason`, an `outcome` of `unknown`)."""
    said = f": {reason}" if reason else "."
    if outcome == "unknown":
        return (
            "This call was started earlier and its outcome is unknown (the process running it stopped "
            f"before it finished). The reviewer decided not to run it again{said}"
        )
    return f"The reviewer rejected this call{said}"
