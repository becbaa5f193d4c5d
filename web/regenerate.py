"""Regenerating the last reply: `POST /api/threads/{thread_id}/regenerate`, and the same for the protocols.

A `regenerate` run answers the thread's last user message again; the reply it replaces stays
stored as a branch of the conversation (see `agent.regenerate`).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from .access import owned_thread, user_of
from .runs import queue_regenerate
from .services import services

__all__ = ("regenerate_routes",)


def regenerate_routes() -> list[BaseRoute]:
    return [Route("/api/threads/{thread_id}/regenerate", regenerate, methods=["POST"])]


async def regenerate(request: Request) -> Response:
    """`202 {"run_id", "thread_id"}`; `409` `run_active`, `approval_pending` or `nothing_to_regenerate`."""
    s = services(request)
    thread = await owned_thread(request, s, user_of(request, s, write=True))
    queued = await queue_regenerate(s, thread)
    return JSONResponse({"run_id": queued.run.run_id, "thread_id": thread.thread_id}, status_code=202)
