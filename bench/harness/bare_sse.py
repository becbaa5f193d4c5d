"""The floor `bench.web` measures our server against: our routes, no persistence.

    python -m bench.harness.bare_sse --port N      (the secret from $DURABLE_CHAT_SECRET)

The demo turn's events from memory, the event loop yielded between them; no database, agent or log.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from web import InvalidToken, verify_token

from .servers import baseline_main

__all__ = ("create_app",)

_ORDER: dict[str, object] = {
    "order_id": "ORD-5678",
    "item": "Widget Pro",
    "quantity": 2,
    "total": 99.98,
    "status": "shipped",
    "tracking": "TRK-111",
    "refunded": 0.0,
}
_WORDS = (
    "Order ",
    "ORD-5678: ",
    "Widget ",
    "Pro ",
    "x2, ",
    "$99.98, ",
    "shipped ",
    "(tracking ",
    "TRK-111).",
)
_Frames = asyncio.Queue[bytes]


class _Refused(Exception):
    def __init__(self, status: int, code: str) -> None:
        super().__init__(code)
        self.status, self.code = status, code


@dataclass
class _Thread:
    thread_id: str
    user_id: str
    created_at: str
    next_id: int = 1
    running: bool = False
    followers: set[_Frames] = field(default_factory=set[_Frames])

    def publish(self, event_type: str, data: dict[str, object]) -> None:
        body = json.dumps(data, separators=(",", ":"))
        frame = f"id: {self.next_id}\nevent: {event_type}\ndata: {body}\n\n".encode()
        self.next_id += 1
        for follower in self.followers:
            follower.put_nowait(frame)


def create_app(secret: str) -> Starlette:
    threads: dict[str, _Thread] = {}
    runs: set[asyncio.Task[None]] = set()

    def user_of(request: Request) -> str:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        try:
            if scheme.lower() != "bearer":
                raise InvalidToken("unauthorized", "a bearer token is needed")
            return verify_token(secret, token.strip()).user_id
        except InvalidToken as error:
            raise _Refused(401, error.code) from error

    def owned(request: Request) -> _Thread:
        user_id = user_of(request)
        thread = threads.get(request.path_params["thread_id"])
        if thread is None or thread.user_id != user_id:
            raise _Refused(404, "not_found")
        return thread

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def create_thread(request: Request) -> Response:
        user_id = user_of(request)
        await request.body()
        now = datetime.now(UTC).isoformat()
        thread = _Thread(str(uuid.uuid4()), user_id, now)
        threads[thread.thread_id] = thread
        body = {
            "thread_id": thread.thread_id,
            "title": None,
            "status": "idle",
            "created_at": now,
            "updated_at": now,
        }
        return JSONResponse(body, status_code=201)

    async def post_message(request: Request) -> Response:
        thread = owned(request)
        body: object = await request.json()
        content = body.get("content") if isinstance(body, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        if not isinstance(content, str) or not content:
            raise _Refused(422, "validation_error")
        if thread.running:
            raise _Refused(409, "run_active")
        thread.running = True
        run_id = str(uuid.uuid4())
        task = asyncio.create_task(_run(thread, run_id, content))
        runs.add(task)
        task.add_done_callback(runs.discard)
        return JSONResponse({"run_id": run_id, "thread_id": thread.thread_id}, status_code=202)

    async def follow(request: Request) -> Response:
        thread = owned(request)
        follower: _Frames = asyncio.Queue()
        thread.followers.add(follower)  # before answering: nothing published from now on is missed

        async def frames() -> AsyncIterator[bytes]:
            try:
                while True:
                    yield await follower.get()
            finally:
                thread.followers.discard(follower)

        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return EventSourceResponse(frames(), sep="\n", ping=15, headers=headers)

    async def refused(request: Request, error: Exception) -> Response:
        assert isinstance(error, _Refused)
        return JSONResponse({"error": {"code": error.code, "message": error.code}}, status_code=error.status)

    return Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/api/threads", create_thread, methods=["POST"]),
            Route("/api/threads/{thread_id}/messages", post_message, methods=["POST"]),
            Route("/api/threads/{thread_id}/events", follow, methods=["GET"]),
        ],
        exception_handlers={_Refused: refused},
    )


async def _run(thread: _Thread, run_id: str, content: str) -> None:
    """The demo turn's events, published with the event loop yielded between them."""
    call = {"tool_call_id": "call_0_lookup_order", "tool_name": "lookup_order"}
    part_id = f"{run_id[:8]}.1.2.0"
    steps: list[tuple[str, dict[str, object]]] = [
        ("run_started", {"kind": "message"}),
        ("user_message", {"content": content}),
        ("tool_call", {**call, "args": {"order_id": "ORD-5678"}}),
        ("tool_result", {**call, "outcome": "success", "content": _ORDER}),
        *(("text_delta", {"part_id": part_id, "delta": word}) for word in _WORDS),
        ("text_done", {"part_id": part_id, "text": "".join(_WORDS)}),
    ]
    try:
        for event_type, data in steps:
            thread.publish(event_type, {"run_id": run_id, **data})
            await asyncio.sleep(0)
    finally:
        thread.running = False
    thread.publish("run_finished", {"run_id": run_id, "status": "completed", "output": "".join(_WORDS)})


if __name__ == "__main__":
    baseline_main(__doc__, lambda secret, _: create_app(secret))
