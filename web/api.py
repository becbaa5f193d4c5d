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
from datetime import datetime
from typing import Literal

from pydantic_ai.messages import ModelMessagesTypeAdapter
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agent import cancel, sub_conversation_id
from store import (
    NotFound,
    ThreadCursor,
)

from .access import MAX_ID_LENGTH, owned_thread, path_id, user_of
from .attachments import attached_files
from .bodies import (
    MessageBody,
    NewThreadBody,
    RenameBody,
    read_body,
)
from .chats import EMPTY_DETAIL, EMPTY_MESSAGE
from .decisions import decision_response
from .errors import ApiError
from .responses import JsonResponse
from .services import Services, services
from .text import unstorable
from .views import approvals_json, record_json, thread_detail, thread_json

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
        Route(
            "/api/threads/{thread_id}/tool-calls/{tool_call_id}/messages", delegated_messages, methods=["GET"]
        ),
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
    file_ids = await attached_files(s, thread_id, user_id, body.files)
    try:
        # Queueing finds the thread only if it is the user's (no read of it first), and drives the
        # run from the same transaction when this worker has room (see `worker.runner`).
        queued = await s.runner.queue(
            thread_id,
            "message",
            content=body.content,
            idempotency_key=body.idempotency_key,
            user_id=user_id,
            file_ids=file_ids,
        )
    except NotFound as error:  # missing, another user's, or deleted meanwhile
        raise ApiError.not_found(f"no thread {thread_id!r}") from error
    return JsonResponse({"run_id": queued.run.run_id, "thread_id": thread_id}, status_code=202)


def _message(body: MessageBody, s: Services) -> MessageBody:
    limit = s.settings.max_message_chars
    if not body.content and not body.files:
        raise ApiError(422, "validation_error", EMPTY_MESSAGE, details=[EMPTY_DETAIL])
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


async def delegated_messages(request: Request) -> Response:
    """The conversation a delegated agent had inside the tool call (`scope.delegate`)."""
    s = services(request)
    thread = await owned_thread(request, s, user_of(request, s))
    tool_call_id = path_id(request, "tool_call_id", "tool call")
    conversation = await s.db.conversations.load(sub_conversation_id(thread.thread_id, tool_call_id))
    if conversation is None:
        raise ApiError.not_found(f"no agent was delegated to in tool call {tool_call_id!r}")
    messages = json.loads(ModelMessagesTypeAdapter.dump_json(conversation.messages))
    return JsonResponse({"tool_call_id": tool_call_id, "messages": messages})


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
