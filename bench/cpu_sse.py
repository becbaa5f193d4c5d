"""The CPU one SSE response costs, in process: interleaved A/B of the response classes.

    python -m bench.cpu_sse [--rounds 30] [--responses 200] [--frames 20]

Each variant serves `--responses` responses of `--frames` frames (a suspension between frames, as
a turn's frames wait for the run) to a stand-in ASGI server whose `receive` answers
`http.disconnect` once the response is complete, as uvicorn's does. Rounds alternate the variants;
the figure is the median per response less the frames' own cost (a bare loop over the same frames).
Interleaved medians, so a busy machine shifts every variant alike; still a rough figure.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import Response, StreamingResponse
from starlette.types import Message, Scope

from stream import ping_frame
from web.sse_response import CountedEventStream

_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_FRAME = b'data: {"type":"text-delta","id":"part","delta":"Your order ORD-5678 "}\n\n'


class _Ping(ServerSentEvent):
    def __init__(self) -> None:
        super().__init__(comment="ping")

    def encode(self) -> bytes:
        return ping_frame()


def _sse_starlette(frames: AsyncIterator[bytes]) -> Response:
    """The response as it was: sse-starlette's own `__call__` (a task group of four tasks)."""
    return EventSourceResponse(  # pyright: ignore[reportUnknownVariableType] -- sse-starlette's loose typing
        frames, sep="\n", ping=15.0, ping_message_factory=_Ping, headers=_HEADERS
    )


def _counted(frames: AsyncIterator[bytes]) -> Response:
    return CountedEventStream(frames, release=lambda: None, ping=15.0, headers=_HEADERS)


def _starlette(frames: AsyncIterator[bytes]) -> Response:
    """Starlette's `StreamingResponse`, what pydantic-ai's adapters answer with (ASGI 2.3: two tasks)."""
    return StreamingResponse(frames, media_type="text/event-stream", headers=_HEADERS)


VARIANTS: dict[str, Callable[[AsyncIterator[bytes]], Response]] = {
    "sse-starlette": _sse_starlette,
    "counted": _counted,
    "starlette": _starlette,
}


async def _frames(count: int) -> AsyncIterator[bytes]:
    for _ in range(count):
        await asyncio.sleep(0)
        yield _FRAME


async def _serve(response: Response) -> int:
    complete = asyncio.Event()
    sent = [0]

    async def receive() -> Message:
        await complete.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body":
            sent[0] += len(message.get("body", b""))
            if not message.get("more_body", False):
                complete.set()

    scope: Scope = {"type": "http", "method": "GET", "asgi": {"version": "3.0", "spec_version": "2.3"}}
    await response(scope, receive, send)
    return sent[0]


async def _bare(frames: AsyncIterator[bytes]) -> None:
    async for _ in frames:
        pass


async def _time(name: str, responses: int, frames: int) -> float:
    started = time.perf_counter()
    for _ in range(responses):
        if name == "frames only":
            await _bare(_frames(frames))
        else:
            await _serve(VARIANTS[name](_frames(frames)))
    return (time.perf_counter() - started) / responses


async def measure(rounds: int, responses: int, frames: int) -> dict[str, list[float]]:
    names = ["frames only", *VARIANTS]
    times: dict[str, list[float]] = {name: [] for name in names}
    for name in names:  # warm-up
        await _time(name, 20, frames)
    for i in range(rounds):
        order = names if i % 2 == 0 else names[::-1]
        for name in order:
            times[name].append(await _time(name, responses, frames))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cpu_sse", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--responses", type=int, default=200)
    parser.add_argument("--frames", type=int, default=20)
    arguments = parser.parse_args()
    times = asyncio.run(measure(arguments.rounds, arguments.responses, arguments.frames))
    floor = statistics.median(times["frames only"])
    print(f"{arguments.frames} frames a response; median of {arguments.rounds} interleaved rounds")
    print(f"{'frames only':>14}: {floor * 1e6:7.1f} µs a response")
    results: dict[str, Any] = {}
    for name in VARIANTS:
        results[name] = median = statistics.median(times[name]) - floor
        print(f"{name:>14}: {median * 1e6:7.1f} µs a response more")
    return 0


if __name__ == "__main__":
    sys.exit(main())
