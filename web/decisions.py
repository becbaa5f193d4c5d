"""Decisions on pending tool calls, as every endpoint that takes them records them.

The native approve/reject endpoints (`web.api`) take one decision a request; the protocol
endpoints (`web.ai_sdk`, `web.ag_ui`) take several at once. Both record each one here, through
`agent.decide`, and hand the resume run the last one starts to the runner.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from starlette.requests import Request
from starlette.responses import Response

from agent import InvalidArguments, ReviewerRequired, decide
from store import Approval, Decision, NotFound, Thread

from .access import path_id
from .bodies import ApproveBody, RejectBody, read_body, validation_details
from .errors import ApiError
from .responses import JsonResponse
from .services import Services

__all__ = ("Answer", "decide_all", "decide_one", "decision_response")


@dataclass(frozen=True)
class Answer:
    """A decision a client gave on a pending call."""

    tool_call_id: str
    decision: Literal["approved", "rejected"]
    override_args: dict[str, object] | None = None
    reason: str | None = None


async def decide_one(
    s: Services,
    user_id: str,
    thread_id: str,
    answer: Answer,
    *,
    reviewer_roles: Collection[str] | None = None,
) -> Decision:
    """Record `answer` by `user_id`, and drive the resume run it starts, if it starts one.

    `reviewer_roles`: the decider is a reviewer with these roles, not the thread's user.

    Raises:
        ApiError: 404 for a call not in the thread (or not for the reviewer's roles), 403
            `reviewer_required` for the user deciding a reviewer's call, 422 `invalid_arguments`.
        AlreadyDecided: The opposite decision was taken already (409, `web.app`).
    """
    decided = await _record(s, user_id, thread_id, answer, reviewer_roles)
    if decided.resume_run_id is not None:
        s.runner.submit(decided.resume_run_id)
    return decided


async def decide_all(s: Services, user_id: str, thread: Thread, answers: Sequence[Answer]) -> str | None:
    """Record each answer as the native approve/reject endpoints do; return the resume run, if one started.

    Every call is checked to belong to the thread before any is decided, so a request naming
    another thread's call (or none) changes nothing. An answer that fails (edited arguments that
    do not fit) leaves the ones before it decided, as separate native requests would.

    Raises:
        ApiError: 404 for a call not in the thread, 403 `reviewer_required`, 422 `invalid_arguments`.
        AlreadyDecided: The opposite decision was taken already (409, `web.app`).
    """
    known = {a.tool_call_id: a for a in await s.db.approvals.list(thread_id=thread.thread_id)}
    for answer in answers:
        if answer.tool_call_id not in known:
            raise ApiError.not_found(f"no tool call {answer.tool_call_id!r} in thread {thread.thread_id!r}")
    for answer in answers:
        if known[answer.tool_call_id].reviewers != "user":
            # Checked for all before any is decided, so nothing changes (and again in each decision).
            raise _reviewer_required(known[answer.tool_call_id])
    resume_run_id: str | None = None
    for answer in answers:
        decided = await _record(s, user_id, thread.thread_id, answer, None)
        resume_run_id = decided.resume_run_id or resume_run_id
    if resume_run_id is not None:
        s.runner.submit(resume_run_id)
    return resume_run_id


async def _record(
    s: Services, user_id: str, thread_id: str, answer: Answer, reviewer_roles: Collection[str] | None
) -> Decision:
    try:
        return await decide(
            s.db,
            thread_id,
            answer.tool_call_id,
            decision=answer.decision,
            decided_by=user_id,
            override_args=answer.override_args,
            reason=answer.reason,
            publish=s.broker.publish,
            reviewer_roles=reviewer_roles,
        )
    except ReviewerRequired as error:
        raise _reviewer_required(error.approval) from error
    except NotFound as error:
        raise ApiError.not_found(f"no tool call {answer.tool_call_id!r} in thread {thread_id!r}") from error
    except InvalidArguments as error:
        raise ApiError(
            422, "invalid_arguments", str(error), details=validation_details(error.errors)
        ) from error


def _reviewer_required(approval: Approval) -> ApiError:
    return ApiError(
        403,
        "reviewer_required",
        f"tool call {approval.tool_call_id!r} is decided by a reviewer with the role "
        f"{approval.reviewers!r}, not by the thread's user",
    )


async def decision_response(
    request: Request,
    s: Services,
    user_id: str,
    thread_id: str,
    decision: Literal["approved", "rejected"],
    *,
    reviewer_roles: Collection[str] | None = None,
) -> Response:
    """Read the decision's body, record it by `user_id` (a reviewer with `reviewer_roles`), answer it."""
    tool_call_id = path_id(request, "tool_call_id", "tool call")
    override_args: dict[str, object] | None = None
    reason: str | None = None
    if decision == "approved":
        override_args = (
            await read_body(request, ApproveBody, max_bytes=s.settings.max_body_bytes)
        ).override_args
    else:
        reason = (await read_body(request, RejectBody, max_bytes=s.settings.max_body_bytes)).reason
    answer = Answer(tool_call_id, decision, override_args=override_args, reason=reason)
    result = await decide_one(s, user_id, thread_id, answer, reviewer_roles=reviewer_roles)
    decided_at = result.approval.decided_at
    return JsonResponse(
        {
            "tool_call_id": tool_call_id,
            "decision": decision,
            "run_id": result.resume_run_id,
            "decided_at": None if decided_at is None else decided_at.isoformat(),
        }
    )
