"""`CountedEventStream`: an SSE response served with one task more, not sse-starlette's task group of four.

sse-starlette's set-up was paid once a turn by the AI SDK endpoint: a response of one frame in
process cost 1.19 M instructions there, 0.17 M here (callgrind). What it keeps of
`EventSourceResponse`, and why: docs/web.md, "Streams".
"""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref
from collections.abc import AsyncIterator, Callable, Mapping

from sse_starlette import EventSourceResponse
from sse_starlette.sse import AppStatus
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from stream import ping_frame

__all__ = ("CountedEventStream",)

logger = logging.getLogger(__name__)

_DISCONNECT, _SHUTDOWN = "disconnect", "shutdown"
_END: Message = {"type": "http.response.body", "body": b"", "more_body": False}


class CountedEventStream(Response):
    """An SSE response of `frames` that holds one of its user's stream slots (`web.limits`) until it ends.

    The response's own task sends the frames; one more task waits for the client's disconnect and
    sends the keep-alive every `ping` seconds. A disconnect or the server's shutdown cancels the
    frames (their cleanup runs) and ends the response. HEAD gets the headers and no body; the frames
    are never started.
    """

    def __init__(
        self,
        frames: AsyncIterator[bytes],
        *,
        release: Callable[[], None],
        ping: float,
        headers: Mapping[str, str],
    ) -> None:
        self._frames = frames
        self._release = release
        self.ping_interval = ping
        self.status_code = 200
        # A copy: middleware may edit the list it is sent.
        self.raw_headers = list(_raw_headers(tuple(headers.items())))
        self._ended_by: str | None = None
        self._done = False
        self._task: asyncio.Task[object] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if scope["method"] == "HEAD":
                await send(
                    {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
                )
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                await self._serve(receive, send)
        finally:
            self._release()

    async def _serve(self, receive: Receive, send: Send) -> None:
        task = self._task = asyncio.current_task()
        assert task is not None
        shutdown = _Shutdown.of(asyncio.get_running_loop())
        if shutdown.fired:  # opened while the server shuts down: an empty stream, the client comes back
            # On a connection closed after it: a client reconnecting at once (a browser's EventSource)
            # would otherwise come back on the same kept-alive connection, again and again, and the
            # server would wait for that connection to finish its shutdown.
            closing = [
                (name, b"close" if name == b"connection" else value) for name, value in self.raw_headers
            ]
            await send({"type": "http.response.start", "status": self.status_code, "headers": closing})
            await send(_END)
            return
        lock = asyncio.Lock()
        watcher = asyncio.create_task(self._watch(receive, send, lock))
        shutdown.streams.add(self)
        sending = True  # a send cut short may have left half a message: nothing may follow it
        try:
            await send(
                {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
            )
            sending = False
            async for frames in self._frames:
                sending = True
                await send({"type": "http.response.body", "body": frames, "more_body": True})
                sending = False
            async with lock:  # no keep-alive after the end
                self._done = True
                await send(_END)
        except asyncio.CancelledError:
            # Ours (a disconnect or the shutdown) ends the response; anyone else's goes on.
            if self._ended_by is None or task.uncancel() > 0:
                raise
            logger.debug("ended an event stream: %s", self._ended_by)
            if self._ended_by == _SHUTDOWN and not sending:
                # The end of the body, so the client sees the stream end and comes back with its
                # `Last-Event-ID`, rather than a connection cut.
                async with lock:
                    self._done = True
                    await send(_END)
        finally:
            self._done = True
            shutdown.streams.discard(self)
            watcher.cancel()
            # Cancelled in a send, the frames are suspended at a `yield`: close them so their cleanup
            # runs now. (Cancelled while producing, they have already run it and closed.)
            aclose = getattr(self._frames, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _watch(self, receive: Receive, send: Send, lock: asyncio.Lock) -> None:
        """Wait for the client's disconnect, sending the keep-alive every `ping` seconds meanwhile."""
        try:
            while True:
                try:
                    async with asyncio.timeout(self.ping_interval or None):
                        message: Message = await receive()
                except TimeoutError:
                    async with lock:
                        if not self._done:
                            await send(
                                {"type": "http.response.body", "body": ping_frame(), "more_body": True}
                            )
                    continue
                if message["type"] == "http.disconnect":
                    break
        except Exception as error:  # a failed keep-alive: the client is gone
            logger.debug("ended an event stream: the keep-alive failed: %r", error)
        self.end(_DISCONNECT)

    def end(self, reason: str) -> None:
        """End the response (the frames are cancelled), unless it has already ended."""
        if self._done or self._ended_by is not None or self._task is None:
            return
        self._ended_by = reason
        self._task.cancel()


class _Shutdown:
    """The server's shutdown as seen by one event loop: one waiter ends every open stream.

    sse-starlette's shared watcher (uvicorn's `should_exit`, or its `AppStatus.should_exit`) tells
    one task per loop, instead of one task per stream as `EventSourceResponse` does.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.streams: set[CountedEventStream] = set()
        self.fired = False
        self._waiter = loop.create_task(self._wait())
        # The entry holds its loop (through the task): dropped when the loop's end cancels the wait.
        self._waiter.add_done_callback(
            lambda waiter: _SHUTDOWNS.pop(loop, None) if waiter.cancelled() else None
        )

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> _Shutdown:
        found = _SHUTDOWNS.get(loop)
        if found is None or (found.fired and not AppStatus.should_exit):
            # None yet, or the shutdown this loop saw is over (a server started again in the same
            # process, as tests do): watch anew, as sse-starlette does not keep a shutdown for the
            # next server either.
            found = _SHUTDOWNS[loop] = cls(loop)
        return found

    async def _wait(self) -> None:
        await _ExitSignal.wait()
        self.fired = True
        for stream in list(self.streams):
            stream.end(_SHUTDOWN)


_SHUTDOWNS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Shutdown] = weakref.WeakKeyDictionary()


class _ExitSignal(EventSourceResponse):
    """sse-starlette's wait for the server's shutdown, which it keeps on its response class."""

    @classmethod
    async def wait(cls) -> None:
        await cls._listen_for_exit_signal()


@functools.cache
def _raw_headers(headers: tuple[tuple[str, str], ...]) -> tuple[tuple[bytes, bytes], ...]:
    """What sse-starlette's `EventSourceResponse` sends, in its order, built once per set of headers."""
    named = {name.lower(): value for name, value in headers}
    named.setdefault("cache-control", "no-store")
    named["connection"] = "keep-alive"
    named["x-accel-buffering"] = "no"
    named["content-type"] = "text/event-stream; charset=utf-8"
    return tuple((name.encode("latin-1"), value.encode("latin-1")) for name, value in named.items())
