"""`CountedEventStream` over raw ASGI messages: headers, HEAD, the end, disconnects, keep-alives, shutdown."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import anyio
import pytest
from sse_starlette.sse import AppStatus
from starlette.types import Message

from web.sse_response import CountedEventStream

pytestmark = pytest.mark.anyio

START = "http.response.start"
BODY = "http.response.body"


class Client:
    """A stand-in for the server and its client: what was sent, and a disconnect on demand."""

    def __init__(self, *, method: str = "GET", block_sends_after: int | None = None) -> None:
        self.method = method
        self.sent: list[Message] = []
        self.gone = anyio.Event()
        self.released = 0
        self._block_after = block_sends_after
        self._wanted: tuple[int, anyio.Event] | None = None

    def release(self) -> None:
        self.released += 1

    async def receive(self) -> Message:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        if self._wanted is not None and len(self.sent) >= self._wanted[0]:
            self._wanted[1].set()
        if self._block_after is not None and len(self.sent) > self._block_after:
            await anyio.sleep_forever()  # a client that reads nothing more

    async def serve(self, response: CountedEventStream) -> None:
        await response({"type": "http", "method": self.method}, self.receive, self.send)

    async def sent_at_least(self, count: int) -> None:
        if len(self.sent) < count:
            self._wanted = (count, anyio.Event())
            await self._wanted[1].wait()

    @property
    def bodies(self) -> list[bytes]:
        return [bytes(m["body"]) for m in self.sent if m["type"] == BODY]

    def ended(self) -> bool:
        return any(m["type"] == BODY and not m.get("more_body", False) for m in self.sent)


class Frames:
    """Frames given, then waiting forever (`idle`) or ending; says whether it started and cleaned up."""

    def __init__(self, *frames: bytes, idle: bool = False) -> None:
        self.frames = frames
        self.idle = idle
        self.started = False
        self.cleaned_up = False
        self.waiting = anyio.Event()

    async def __call__(self) -> AsyncIterator[bytes]:
        self.started = True
        try:
            for frame in self.frames:
                yield frame
            if self.idle:
                self.waiting.set()
                await anyio.sleep_forever()
        finally:
            self.cleaned_up = True


def response(frames: Frames, client: Client, *, ping: float = 15.0) -> CountedEventStream:
    return CountedEventStream(
        frames(), release=client.release, ping=ping, headers={"Cache-Control": "no-cache", "X-Extra": "1"}
    )


@pytest.fixture
def shutting_down() -> Iterator[None]:
    """The server's shutdown as uvicorn's signal handler marks it (sse-starlette patches it to)."""
    AppStatus.should_exit = True
    try:
        yield
    finally:
        AppStatus.should_exit = False


def test_the_headers_are_sse_starlettes() -> None:
    frames, client = Frames(), Client()
    assert response(frames, client).raw_headers == [
        (b"cache-control", b"no-cache"),
        (b"x-extra", b"1"),
        (b"connection", b"keep-alive"),
        (b"x-accel-buffering", b"no"),
        (b"content-type", b"text/event-stream; charset=utf-8"),
    ]
    # Without one of its own, the cache is told not to store.
    plain = CountedEventStream(frames(), release=client.release, ping=15.0, headers={})
    assert (b"cache-control", b"no-store") in plain.raw_headers


async def test_the_frames_one_write_each_then_the_end() -> None:
    frames, client = Frames(b"data: 1\n\n", b"data: 2\n\n"), Client()
    await client.serve(response(frames, client))
    assert [m["type"] for m in client.sent] == [START, BODY, BODY, BODY]
    assert client.sent[0]["status"] == 200
    assert client.bodies == [b"data: 1\n\n", b"data: 2\n\n", b""]
    assert client.ended()
    assert frames.cleaned_up
    assert client.released == 1


async def test_head_is_the_headers_alone_and_never_starts_the_frames() -> None:
    frames, client = Frames(b"data: 1\n\n", idle=True), Client(method="HEAD")
    await client.serve(response(frames, client))
    assert [m["type"] for m in client.sent] == [START, BODY]
    assert client.bodies == [b""]
    assert not frames.started
    assert client.released == 1


async def test_a_disconnect_ends_waiting_frames_and_runs_their_cleanup() -> None:
    frames, client = Frames(b"data: 1\n\n", idle=True), Client()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(client.serve, response(frames, client))
        await frames.waiting.wait()
        assert client.released == 0
        client.gone.set()
    # The response returned on its own (no error), with nothing more sent to the gone client.
    assert client.bodies == [b"data: 1\n\n"]
    assert frames.cleaned_up
    assert client.released == 1


async def test_a_disconnect_during_a_send_closes_the_frames() -> None:
    frames, client = Frames(b"data: 1\n\n", b"data: 2\n\n", idle=True), Client(block_sends_after=2)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(client.serve, response(frames, client))
        await client.sent_at_least(3)
        client.gone.set()
    # The frames were suspended at the `yield` of the second: closed, their cleanup ran.
    assert frames.cleaned_up
    assert not frames.waiting.is_set()
    assert client.released == 1


async def test_an_idle_stream_gets_keep_alives_until_the_client_goes() -> None:
    frames, client = Frames(idle=True), Client()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(client.serve, response(frames, client, ping=0.01))
        await client.sent_at_least(4)  # the start and three keep-alives
        client.gone.set()
    assert set(client.bodies) == {b": ping\n\n"}
    assert frames.cleaned_up
    assert not client.ended()
    assert client.released == 1


async def test_no_keep_alive_follows_the_end() -> None:
    frames, client = Frames(b"data: 1\n\n"), Client()
    await client.serve(response(frames, client, ping=0.001))
    await anyio.sleep(0.05)  # time for keep-alives, had the watcher outlived the response
    assert client.bodies[-1] == b""


async def test_someone_elses_cancellation_goes_on_and_still_releases_and_cleans_up() -> None:
    frames, client = Frames(b"data: 1\n\n", idle=True), Client()
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(client.serve, response(frames, client))
            await frames.waiting.wait()
            scope.cancel()
    assert scope.cancelled_caught
    assert frames.cleaned_up
    assert client.released == 1


@pytest.mark.usefixtures("shutting_down")
async def test_the_shutdown_ends_an_open_stream_with_the_end_of_its_body() -> None:
    frames, client = Frames(b"data: 1\n\n", idle=True), Client()
    with anyio.fail_after(30):  # sse-starlette's watcher looks twice a second
        await client.serve(response(frames, client))
    assert client.bodies == [b"data: 1\n\n", b""]
    assert client.ended()
    assert frames.cleaned_up
    assert client.released == 1
    # One opened while the server shuts down is empty at once.
    later, other = Frames(b"data: 1\n\n"), Client()
    await other.serve(response(later, other))
    assert [m["type"] for m in other.sent] == [START, BODY]
    assert other.bodies == [b""]
    # ... on a connection closed after it, so that a client reconnecting at once does not keep it open.
    assert dict(other.sent[0]["headers"])[b"connection"] == b"close"
    assert not later.started
    assert other.released == 1


async def test_a_stream_after_a_shutdown_that_is_over_streams_again() -> None:
    # One event loop for several servers, one after the other (as tests run them): the first one's
    # shutdown must not end the next one's streams.
    AppStatus.should_exit = True
    try:
        frames, client = Frames(b"data: 1\n\n", idle=True), Client()
        with anyio.fail_after(30):
            await client.serve(response(frames, client))
        assert client.ended()
    finally:
        AppStatus.should_exit = False
    after, again = Frames(b"data: 2\n\n"), Client()
    with anyio.fail_after(30):
        await again.serve(response(after, again))
    assert again.bodies == [b"data: 2\n\n", b""]
    assert after.started
