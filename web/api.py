"""The JSON API: threads, messages, decisions on tool calls, approvals and records.

Every handler authenticates first and scopes everything to the token's user: another user's
thread is a `404`, exactly like one that does not exist. Writes (POST, DELETE) also take a
token from the user's rate-limit bucket. Runs are queued in the database and driven by the
`Runner`, never inside the request.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Literal

from pydantic_ai.messages import ModelMessagesTypeAdapter
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agent import ApprovalReview, cancel, stored_events
from store import (
    Approval,
    NotFound,
    Record,
    Thread,
    ThreadCursor,
)
from stream import RunFinished

from .access import MAX_ID_LENGTH, owned_thread, path_id, user_of
from .bodies import (
    ApproveBody,
    MessageBody,
    NewThreadBody,
    RejectBody,
    RenameBody,
    read_body,
)
from .decisions import Answer, decide_one
from .errors import ApiError
from .responses import JsonResponse
from .services import Services, services
from .text import unstorable

__all__ = ("api_routes",)

DEFAULT_PAGE = 20
MAX_PAGE = 100
_MAX_CURSOR_LENGTH = 1000
"""Far more than any cursor this API makes (an ISO time and a thread id), far less than JSON can nest."""


def api_routes() -> list[BaseRoute]:
    return [
        Route("/api/threads", create_thread, methods=["POST"]),
        Route("/api/threads", list_threads, methods=["GET"]),
        Route("/api/threads/{thread_id}", get_thread, methods=["GET"]),
        Route("/api/threads/{thread_id}", delete_thread, methods=["DELETE"]),
        Route("/api/threads/{thread_id}", rename_thread, methods=["PATCH"]),
        Route("/api/threads/{thread_id}/cancel", cancel_run, methods=["POST"]),
        Route("/api/threads/{thread_id}/messages", post_message, methods=["POST"]),
        Route("/api/threads/{thread_id}/tool-calls/{tool_call_id}/approve", approve, methods=["POST"]),
        Route("/api/threads/{thread_id}/tool-calls/{tool_call_id}/reject", reject, methods=["POST"]),
        Route("/api/threads/{thread_id}/records", list_records, methods=["GET"]),
        Route("/api/approvals", list_approvals, methods=["GET"]),
        Route("/api/app", app_info, methods=["GET"]),
    ]


# -- threads -----------------------------------------------------------------------------------------


async def create_thread(request: Request) -> Response:
    s = services(request)
    user_id = user_of(request, s, write=True)
    body = await read_body(request, NewThreadBody, max_bytes=s.settings.max_body_bytes)
    thread = await s.db.threads.create(user_id=user_id, title=body.title)
    return JsonResponse(thread_json(thread), status_code=201)


async def list_threads(request: Request) -> Response:
    s = services(request)
    user_id = user_of(request, s)
    limit = _limit(request.query_params.get("limit"))
    cursor_text = request.query_params.get("cursor")
    cursor = None if not cursor_text else decode_cursor(cursor_text)
    page = await s.db.threads.list(user_id=user_id, limit=limit + 1, after=cursor)
    more, page = len(page) > limit, page[:limit]
    next_cursor = encode_cursor(ThreadCursor(page[-1].updated_at, page[-1].thread_id)) if more else None
    return JsonResponse({"threads": [thread_json(t) for t in page], "next_cursor": next_cursor})


async def get_thread(request: Request) -> Response:
    s = services(request)
    thread = await owned_thread(request, s, user_of(request, s))
    return JsonResponse(await thread_detail(s, thread))


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
    trail = await approvals_json(s, thread.user_id, await s.db.approvals.list(thread_id=thread.thread_id))
    last_event_id = await s.db.events.newest(thread.thread_id)
    outputs = await outputs_json(s, thread.thread_id)
    return {
        **thread_json(thread),
        "messages": messages,
        "pending_approvals": [a for a in trail if a["status"] == "pending"],
        # Every approval, decided or not, in the order the calls were made: the decision trail.
        "approvals": trail,
        # The structured outputs of its runs, which the messages hold only as the model wrote them.
        "outputs": outputs,
        "last_event_id": last_event_id,
        "messages_event_id": thread.checkpoint_event_id,
    }


async def rename_thread(request: Request) -> Response:
    s = services(request)
    user_id = user_of(request, s, write=True)
    thread = await owned_thread(request, s, user_id)
    body = await read_body(request, RenameBody, max_bytes=s.settings.max_body_bytes)
    try:
        renamed = await s.db.threads.rename(thread.thread_id, body.title, user_id=user_id)
    except NotFound as error:  # deleted meanwhile
        raise ApiError.not_found(f"no thread {thread.thread_id!r}") from error
    return JsonResponse(thread_json(renamed))


async def delete_thread(request: Request) -> Response:
    s = services(request)
    thread = await owned_thread(request, s, user_of(request, s, write=True))
    await s.db.delete_thread(thread.thread_id)
    return Response(status_code=204)


# -- messages and decisions --------------------------------------------------------------------------


async def post_message(request: Request) -> Response:
    s = services(request)
    user_id = user_of(request, s, write=True)
    thread_id = path_id(request, "thread_id", "thread")
    try:
        body = _message(await read_body(request, MessageBody, max_bytes=s.settings.max_body_bytes), s)
    except ApiError:
        # A missing thread answers 404 before a bad body does; only this path reads the thread.
        await owned_thread(request, s, user_id)
        raise
    try:
        # Queueing finds the thread only if it is the user's (no read of it first), and drives the
        # run from the same transaction when this worker has room (see `worker.runner`).
        queued = await s.runner.queue(
            thread_id, "message", content=body.content, idempotency_key=body.idempotency_key, user_id=user_id
        )
    except NotFound as error:  # missing, another user's, or deleted meanwhile
        raise ApiError.not_found(f"no thread {thread_id!r}") from error
    return JsonResponse({"run_id": queued.run.run_id, "thread_id": thread_id}, status_code=202)


def _message(body: MessageBody, s: Services) -> MessageBody:
    limit = s.settings.max_message_chars
    if len(body.content) > limit:
        details: list[dict[str, object]] = [
            {"loc": "content", "msg": f"at most {limit} characters", "type": "string_too_long"}
        ]
        raise ApiError(
            422,
            "validation_error",
            f"the message is {len(body.content)} characters long; the limit is {limit}",
            details=details,
        )
    return body


async def cancel_run(request: Request) -> Response:
    """Stop the thread's run: it ends `cancelled` at once, whichever worker drives it."""
    s = services(request)
    thread = await owned_thread(request, s, user_of(request, s, write=True))
    try:
        cancelled = await cancel(s.db, thread.thread_id, publish=s.broker.publish)
    except NotFound as error:  # deleted meanwhile
        raise ApiError.not_found(f"no thread {thread.thread_id!r}") from error
    # Driven here: stop it now rather than at its next (fenced) write.
    s.runner.stop(cancelled.run_id)
    return JsonResponse({"run_id": cancelled.run_id, "status": "cancelled"})


async def approve(request: Request) -> Response:
    return await _decide(request, "approved")


async def reject(request: Request) -> Response:
    return await _decide(request, "rejected")


async def _decide(request: Request, decision: Literal["approved", "rejected"]) -> Response:
    s = services(request)
    user_id = user_of(request, s, write=True)
    thread = await owned_thread(request, s, user_id)
    return await decision_response(request, s, user_id, thread.thread_id, decision)


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


# -- approvals and records ---------------------------------------------------------------------------


async def list_approvals(request: Request) -> Response:
    s = services(request)
    user_id = user_of(request, s)
    status = request.query_params.get("status")
    if status not in (None, "pending"):
        raise ApiError(422, "validation_error", f"status must be 'pending' or absent, not {status!r}")
    approvals = await s.db.approvals.list(user_id=user_id, status="pending" if status else None)
    return JsonResponse({"approvals": await approvals_json(s, user_id, approvals)})


async def app_info(request: Request) -> Response:
    """`GET /api/app`: what a client shows of the app served: its name and starter prompts."""
    s = services(request)
    user_of(request, s)
    return JsonResponse({"name": s.app.title, "starter_prompts": list(s.app.starter_prompts)})


async def list_records(request: Request) -> Response:
    s = services(request)
    thread = await owned_thread(request, s, user_of(request, s))
    records = await s.db.records.list(thread.thread_id)
    return JsonResponse({"records": [record_json(r) for r in records]})


# -- shared by the handlers --------------------------------------------------------------------------


def _limit(text: str | None) -> int:
    if text is None or text == "":
        return DEFAULT_PAGE
    # ASCII digits only: `isdigit` also takes "٣" (read as 3) and "²" (which `int` refuses).
    if not (text.isascii() and text.isdigit() and len(text) <= 4) or not 1 <= int(text) <= MAX_PAGE:
        raise ApiError(
            422, "validation_error", f"limit must be an integer from 1 to {MAX_PAGE}, not {text!r}"
        )
    return int(text)


def encode_cursor(cursor: ThreadCursor) -> str:
    """An opaque cursor: base64url of `[updated_at, thread_id]`."""
    raw = json.dumps([cursor.updated_at.isoformat(), cursor.thread_id]).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(text: str) -> ThreadCursor:
    """The cursor `encode_cursor` made.

    Raises:
        ApiError: 422 `validation_error` for anything else.
    """
    invalid = ApiError(422, "validation_error", f"cursor {text[:100]!r} is not a cursor this API returned")
    if len(text) > _MAX_CURSOR_LENGTH:
        raise invalid
    try:
        decoded: object = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError, RecursionError) as error:
        raise invalid from error
    match decoded:
        case [str(updated_at), str(thread_id)] if (
            not unstorable(thread_id) and len(thread_id) <= MAX_ID_LENGTH
        ):
            try:
                moment = datetime.fromisoformat(updated_at)
            except ValueError as error:
                raise invalid from error
            if moment.tzinfo is None:
                raise invalid
            return ThreadCursor(moment, thread_id)
        case _:
            raise invalid


def thread_json(thread: Thread) -> dict[str, object]:
    return {
        "thread_id": thread.thread_id,
        "title": thread.title,
        "status": thread.status,
        "created_at": thread.created_at.isoformat(),
        "updated_at": thread.updated_at.isoformat(),
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
    """An approval as the API answers it; `outcome`, `previous`, `context`, `decided_role` and
    `escalations` only when there are any."""
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
