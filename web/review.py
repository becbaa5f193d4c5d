"""The reviewer's API under `/api/review/`: the queue across users, a reviewed thread, decisions, events.

Everything here needs a token with review roles; a token without any gets `404` on every path, as
if the endpoints did not exist. A reviewer sees only calls for their roles, and only threads where
they have or had one to decide. See `docs/review.md`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import AsyncGenerator
from datetime import datetime
from typing import Literal

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from store import NotFound, QueueCursor, QueueItem, Thread
from stream import encode_frame

from .access import MAX_ID_LENGTH, path_id, user_of
from .auth import roles_of
from .decisions import decision_response
from .errors import ApiError
from .following import after_id, stream_response
from .responses import JsonResponse
from .services import Services, services
from .text import unstorable
from .views import approvals_json, thread_detail

__all__ = ("queue_frames", "review_routes")

DEFAULT_PAGE = 20
MAX_PAGE = 100


def review_routes() -> list[BaseRoute]:
    return [
        Route("/api/review/approvals", list_queue, methods=["GET"]),
        Route("/api/review/events", follow_queue, methods=["GET"]),
        Route("/api/review/threads/{thread_id}", get_reviewed_thread, methods=["GET"]),
        Route("/api/review/threads/{thread_id}/tool-calls/{tool_call_id}/approve", approve, methods=["POST"]),
        Route("/api/review/threads/{thread_id}/tool-calls/{tool_call_id}/reject", reject, methods=["POST"]),
        Route("/api/review/{rest:path}", not_found, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
    ]


def reviewer(request: Request, s: Services, *, write: bool = False) -> tuple[str, frozenset[str]]:
    """The request's reviewer and roles; a token with no role is a 404, as for a path that does not exist."""
    user_id = user_of(request, s, write=write)
    roles = roles_of(request)
    if not roles:
        raise ApiError.not_found(f"no such endpoint {request.url.path[:200]!r}")
    return user_id, roles


async def not_found(request: Request) -> Response:
    reviewer(request, services(request))
    raise ApiError.not_found(f"no such endpoint {request.url.path[:200]!r}")


async def list_queue(request: Request) -> Response:
    s = services(request)
    _, roles = reviewer(request, s)
    status = request.query_params.get("status") or "pending"
    if status not in ("pending", "decided"):
        raise ApiError(422, "validation_error", f"status must be 'pending' or 'decided', not {status[:40]!r}")
    limit = _limit(request.query_params.get("limit"))
    cursor_text = request.query_params.get("cursor")
    after = None if not cursor_text else _decode_cursor(cursor_text)
    listed: Literal["pending", "decided"] = "pending" if status == "pending" else "decided"
    # Read before the queue: a follower resuming after it misses no change the page did not see.
    last_event_id = await s.db.reviews.last_event_id(roles)
    items = await s.db.reviews.queue(roles, status=listed, limit=limit + 1, after=after)
    page, more = items[:limit], len(items) > limit
    return JsonResponse(
        {
            "approvals": [await _item_json(s, item) for item in page],
            "next_cursor": _encode_cursor(page[-1], listed) if more and page else None,
            "last_event_id": last_event_id,
        }
    )


async def get_reviewed_thread(request: Request) -> Response:
    s = services(request)
    _, roles = reviewer(request, s)
    thread = await _reviewed_thread(request, s, roles)
    detail = await thread_detail(s, thread)
    records = await s.db.records.list(thread.thread_id)
    detail["user_id"] = thread.user_id
    detail["records"] = [
        {
            "tool_call_id": r.tool_call_id,
            "run_id": r.run_id,
            "kind": r.kind,
            "data": r.data,
            "created_at": r.created_at.isoformat(),
        }
        for r in records
    ]
    return JsonResponse(detail)


async def approve(request: Request) -> Response:
    return await _decide(request, "approved")


async def reject(request: Request) -> Response:
    return await _decide(request, "rejected")


async def _decide(request: Request, decision: Literal["approved", "rejected"]) -> Response:
    s = services(request)
    user_id, roles = reviewer(request, s, write=True)
    thread = await _reviewed_thread(request, s, roles)
    return await decision_response(request, s, user_id, thread.thread_id, decision, reviewer_roles=roles)


async def follow_queue(request: Request) -> Response:
    """`GET /api/review/events`: the queue's changes for the token's roles, resumable by `Last-Event-ID`."""
    s = services(request)
    user_id, roles = reviewer(request, s)
    after = after_id(request)
    return stream_response(s, queue_frames(s, roles, after), user_id=user_id)


async def queue_frames(s: Services, roles: frozenset[str], after: int) -> AsyncGenerator[bytes]:
    """The SSE frames of the review events for `roles` after `after`, then of new ones, polled."""
    # Read from the log, as a replay and then every poll: the log is the only source, so nothing is
    # missed or repeated across reconnects.
    while True:
        events = await s.db.reviews.events_after(roles, after)
        if events:
            yield b"".join(
                encode_frame(
                    data=json.dumps(e.data, separators=(",", ":")), event=e.type, event_id=e.event_id
                )
                for e in events
            )
            after = events[-1].event_id
            continue
        await asyncio.sleep(s.settings.sse_poll_seconds)


async def _reviewed_thread(request: Request, s: Services, roles: frozenset[str]) -> Thread:
    thread_id = path_id(request, "thread_id", "thread")
    missing = ApiError.not_found(f"no thread {thread_id!r} to review")
    if not await s.db.reviews.reviews_thread(thread_id, roles):
        raise missing
    try:
        return await s.db.threads.get(thread_id)
    except NotFound as error:
        raise missing from error


async def _item_json(s: Services, item: QueueItem) -> dict[str, object]:
    [approval] = await approvals_json(s, item.user_id, [item.approval])
    return {
        **approval,
        "user_id": item.user_id,
        "thread_title": item.thread_title,
        "context": approval.get("context"),
    }


def _limit(text: str | None) -> int:
    if text is None or text == "":
        return DEFAULT_PAGE
    if not (text.isascii() and text.isdigit() and len(text) <= 4) or not 1 <= int(text) <= MAX_PAGE:
        raise ApiError(
            422, "validation_error", f"limit must be an integer from 1 to {MAX_PAGE}, not {text[:40]!r}"
        )
    return int(text)


def _encode_cursor(item: QueueItem, status: Literal["pending", "decided"]) -> str:
    approval = item.approval
    at = approval.created_at if status == "pending" else approval.decided_at
    assert at is not None
    raw = json.dumps([at.isoformat(), approval.thread_id, approval.tool_call_id]).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _decode_cursor(text: str) -> QueueCursor:
    invalid = ApiError(422, "validation_error", f"cursor {text[:100]!r} is not a cursor this API returned")
    if len(text) > 2000:
        raise invalid
    try:
        decoded: object = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError, RecursionError) as error:
        raise invalid from error
    match decoded:
        case [str(at), str(thread_id), str(tool_call_id)] if all(
            not unstorable(v) and len(v) <= MAX_ID_LENGTH for v in (thread_id, tool_call_id)
        ):
            try:
                moment = datetime.fromisoformat(at)
            except ValueError as error:
                raise invalid from error
            if moment.tzinfo is None:
                raise invalid
            return QueueCursor(moment, thread_id, tool_call_id)
        case _:
            raise invalid
