"""Regenerating the last reply: `POST /api/threads/{thread_id}/regenerate`, and the same for the protocols.

A `regenerate` run answers the thread's last user message again; the reply it replaces stays
stored as a branch of the conversation (see `agent.regenerate`).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from agent import Opened, last_prompt
from store import ApprovalPending, NotFound, RunActive, Thread

from .api import owned_thread, user_of
from .errors import ApiError
from .services import Services, services

__all__ = ("queue_regenerate", "regenerate_routes")


def regenerate_routes() -> list[BaseRoute]:
    return [Route("/api/threads/{thread_id}/regenerate", regenerate, methods=["POST"])]


async def regenerate(request: Request) -> Response:
    """`202 {"run_id", "thread_id"}`; `409` `run_active`, `approval_pending` or `nothing_to_regenerate`."""
    s = services(request)
    thread = await owned_thread(request, s, user_of(request, s, write=True))
    queued = await queue_regenerate(s, thread)
    return JSONResponse({"run_id": queued.run.run_id, "thread_id": thread.thread_id}, status_code=202)


async def queue_regenerate(s: Services, thread: Thread, *, idempotency_key: str | None = None) -> Opened:
    """Queue the run that answers the thread's last user message again, dropping the last reply.

    Raises:
        ApiError: 409 `run_active`, `approval_pending` or `nothing_to_regenerate`.
    """
    conversation = await s.db.conversations.load(thread.thread_id)
    found = None if conversation is None else last_prompt(conversation.messages)
    if found is None:
        raise ApiError(
            409, "nothing_to_regenerate", f"thread {thread.thread_id!r} has no message to answer again"
        )
    try:
        # Queued as a message is: claimed by this worker in the same transaction when it has room.
        queued = await s.runner.queue(
            thread.thread_id, "regenerate", content=found[1], idempotency_key=idempotency_key
        )
    except (RunActive, ApprovalPending) as error:
        raise ApiError(409, error.code, str(error)) from error
    except NotFound as error:
        raise ApiError.not_found(f"no thread {thread.thread_id!r}") from error
    return queued
