"""`GET /api/threads/{thread_id}/events`: a thread's event log, then its live events, over SSE.

The client names where it is with `Last-Event-ID` (or `?after=`, for clients that cannot set
headers); it gets every event with a greater id, in order, none missing, none repeated, then
the live ones (`web.following` says how).

Frames come from `stream.encode_events` only, a batch at a time (a replay page, or what the broker
handed over since the last write) in one write; the keep-alive is `stream.ping_frame`, sent by
`web.sse_response.CountedEventStream`, which also ends the stream when the client disconnects.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from .access import owned_thread, user_of
from .following import after_id, event_frames, idle_poll_seconds, stream_response
from .services import services

__all__ = ("sse_routes",)


def sse_routes() -> list[BaseRoute]:
    return [Route("/api/threads/{thread_id}/events", follow_events, methods=["GET"])]


async def follow_events(request: Request) -> Response:
    s = services(request)
    user_id = user_of(request, s)
    thread = await owned_thread(request, s, user_id)
    after = after_id(request)
    frames = event_frames(s.db, s.broker, thread.thread_id, after=after, poll_seconds=idle_poll_seconds(s))
    return stream_response(s, frames, user_id=user_id)
