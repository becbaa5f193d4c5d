"""Threads, approvals, outputs and records as the API answers them, for every endpoint that shows them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from pydantic_ai.messages import ModelMessagesTypeAdapter

from agent import ApprovalReview, stored_events
from store import Approval, Record, Thread
from stream import RunFinished

from .attachments import annotate_attachments
from .services import Services

__all__ = ("approval_json", "approvals_json", "outputs_json", "record_json", "thread_detail", "thread_json")


async def thread_detail(s: Services, thread: Thread) -> dict[str, object]:
    """A thread with its messages, approvals, outputs and newest event id, as `GET` answers it."""
    # The messages and the id of the newest event they reflect, read consistently: a checkpoint
    # committed between the two reads is noticed and the pair read again.
    conversation = await s.db.conversations.load(thread.thread_id)
    for _ in range(5):
        again = await s.db.threads.get(thread.thread_id)
        if again.checkpoint_event_id == thread.checkpoint_event_id:
            break
        thread = again
        conversation = await s.db.conversations.load(thread.thread_id)
    messages: object = (
        [] if conversation is None else json.loads(ModelMessagesTypeAdapter.dump_json(conversation.messages))
    )
    files = (
        await s.db.files.list(thread.thread_id, user_id=thread.user_id) if conversation is not None else []
    )
    attachments = annotate_attachments(thread.thread_id, messages, files)
    trail = await approvals_json(s, thread.user_id, await s.db.approvals.list(thread_id=thread.thread_id))
    last_event_id = await s.db.events.newest(thread.thread_id)
    outputs = await outputs_json(s, thread.thread_id)
    return {
        **thread_json(thread),
        "messages": messages,
        # The files the messages attach, in order, each marked `removed` once deleted.
        "attachments": attachments,
        "pending_approvals": [a for a in trail if a["status"] == "pending"],
        # Every approval, decided or not, in the order the calls were made: the decision trail.
        "approvals": trail,
        # The structured outputs of its runs, which the messages hold only as the model wrote them.
        "outputs": outputs,
        "last_event_id": last_event_id,
        "messages_event_id": thread.checkpoint_event_id,
    }


def thread_json(thread: Thread) -> dict[str, object]:
    """A thread as the API answers it; `agent` once a hand-off named who answers its next turn."""
    return {
        "thread_id": thread.thread_id,
        "title": thread.title,
        "status": thread.status,
        "created_at": thread.created_at.isoformat(),
        "updated_at": thread.updated_at.isoformat(),
        **({} if thread.agent is None else {"agent": thread.agent}),
    }


async def approvals_json(s: Services, user_id: str, approvals: Sequence[Approval]) -> list[dict[str, object]]:
    """`approvals` as the API answers them; a pending one carries the app's context for its reviewer."""
    answered: list[dict[str, object]] = []
    for approval in approvals:
        context = None
        if approval.status == "pending":
            context = await s.app.context_for(
                ApprovalReview(
                    thread_id=approval.thread_id,
                    user_id=user_id,
                    tool_call_id=approval.tool_call_id,
                    tool_name=approval.tool_name,
                    args=approval.args,
                    engine=s.db.engine,
                    metadata=approval.metadata,
                )
            )
        answered.append(approval_json(approval, context=context))
    return answered


async def outputs_json(s: Services, thread_id: str) -> list[dict[str, object]]:
    """The thread's structured run outputs, oldest first, as their `run_finished` events carried them."""
    outputs: list[dict[str, object]] = []
    for stored in stored_events(await s.db.events.of_types(thread_id, ["run_finished"])):
        finished = stored.event
        if isinstance(finished, RunFinished) and finished.output_type is not None:
            outputs.append(
                {
                    "run_id": finished.run_id,
                    "tool_call_id": finished.output_tool_call_id,
                    "output": finished.output,
                    "output_type": finished.output_type,
                }
            )
    return outputs


def approval_json(approval: Approval, *, context: Mapping[str, object] | None = None) -> dict[str, object]:
    """An approval as the API answers it; `outcome`, `previous`, `context`, `decided_role`,
    `escalations`, `agent` and `path` only when there are any (`agent` and `path` name a delegated
    agent and its chain)."""
    extra: dict[str, object] = {}
    if approval.outcome is not None:
        extra["outcome"] = approval.outcome
    if approval.previous is not None:
        extra["previous"] = approval.previous
    if context is not None:
        extra["context"] = dict(context)
    if approval.decided_role is not None:
        extra["decided_role"] = approval.decided_role
    if approval.escalations:
        extra["escalations"] = approval.escalations
    if approval.agent is not None:
        extra["agent"] = approval.agent
    if approval.path is not None:
        extra["path"] = list(approval.path)
    return {
        "thread_id": approval.thread_id,
        "tool_call_id": approval.tool_call_id,
        "run_id": approval.run_id,
        "tool_name": approval.tool_name,
        "args": approval.args,
        "metadata": approval.metadata,
        "status": approval.status,
        "override_args": approval.override_args,
        "reason": approval.reason,
        "decided_by": approval.decided_by,
        "decided_at": None if approval.decided_at is None else approval.decided_at.isoformat(),
        "created_at": approval.created_at.isoformat(),
        "reviewers": approval.reviewers,
        "expires_at": None if approval.expires_at is None else approval.expires_at.isoformat(),
        **extra,
    }


def record_json(record: Record) -> dict[str, object]:
    return {
        "tool_call_id": record.tool_call_id,
        "run_id": record.run_id,
        "kind": record.kind,
        "data": record.data,
        "created_at": record.created_at.isoformat(),
    }
