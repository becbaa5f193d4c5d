"""The client side of `bench.web`: simulated users over HTTP and SSE, and what they saw.

Each user creates a thread, opens its event stream (`GET /api/threads/{id}/events`, bearer
token) and keeps it open; once every user's stream is open they all start at once, and each
sends its turns one after another: `POST …/messages`, then the stream's events up to
`run_finished`. A turn counts only if its events are all there: increasing ids, the demo turn's
shape (`run_started`, `user_message`, `tool_call`, `tool_result`, `text_delta`…, `text_done`,
`run_finished` with status `completed`), the POST's `run_id` on every one, and `text_done`
equal to its deltas. Anything else is an error, by kind: a non-2xx answer, a transport error, a
stream that ends or stalls, an event missing or out of place.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx

from bench.web_tokens import issue_token

__all__ = ("PROMPT", "Load", "LoadResult", "run_load")

PROMPT = "Where is ORD-5678?"
_HEAD = ("run_started", "user_message", "tool_call", "tool_result")


@dataclass(frozen=True)
class Load:
    users: int
    turns: int
    secret: str
    setup_timeout: float = 90.0
    """How long the users have to create their threads and open their streams."""
    deadline: float = 150.0
    """How long the turns may take in all; turns not finished by then are errors."""
    stall_timeout: float = 120.0
    """How long a stream may go without an event while its turn runs."""


@dataclass(frozen=True)
class _Event:
    received: float
    event_id: int | None
    type: str
    data: dict[str, object]


class _End:
    """The stream ended; `error` says how, if not cleanly."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


@dataclass
class LoadResult:
    users: int
    turns_per_user: int
    streams_open: int = 0
    setup_seconds: float = 0.0
    elapsed: float = 0.0
    """From the start signal (every stream open) to the last user's end."""
    completed_turns: int = 0
    first_delta: list[float] = field(default_factory=list[float])
    """Seconds from sending the POST to receiving the turn's first `text_delta`."""
    post_latency: list[float] = field(default_factory=list[float])
    turn_latency: list[float] = field(default_factory=list[float])
    """Seconds from sending the POST to receiving `run_finished`."""
    errors: Counter[str] = field(default_factory=Counter[str])
    error_samples: dict[str, str] = field(default_factory=dict[str, str])
    peak_streams: int = 0

    @property
    def turns_per_second(self) -> float:
        return self.completed_turns / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def error(self, kind: str, detail: str = "") -> None:
        self.errors[kind] += 1
        self.error_samples.setdefault(kind, detail or kind)


class _Gate:
    """Holds the users until every one has opened its stream (or failed to)."""

    def __init__(self, users: int) -> None:
        self.arrived = 0
        self.ready = 0
        self._users = users
        self.all_arrived = asyncio.Event()
        self.go = asyncio.Event()

    def arrive(self, *, ready: bool) -> None:
        self.arrived += 1
        self.ready += ready
        if self.arrived >= self._users:
            self.all_arrived.set()


async def run_load(
    base_url: str | Sequence[str], load: Load, *, on_start: Callable[[], None] | None = None
) -> LoadResult:
    """Run `load` against the server at `base_url`; `on_start` is called when the turns start.

    Given several servers' URLs, user n works on the n-th (round robin): its thread, stream and turns.
    """
    base_urls = [base_url] if isinstance(base_url, str) else list(base_url)
    result = LoadResult(users=load.users, turns_per_user=load.turns)
    gate = _Gate(load.users)
    timeout = httpx.Timeout(connect=60.0, read=load.stall_timeout, write=60.0, pool=None)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    open_streams = [0]
    # A client, and so a connection pool, per user: httpcore's pool scans every connection it holds
    # on each request, which at hundreds of connections made the shared pool the load generator's
    # main cost. One TLS context for all (never used: plain HTTP on loopback) saves building 500.
    tls = ssl.create_default_context()
    async with contextlib.AsyncExitStack() as clients:
        started = time.perf_counter()
        users = [
            asyncio.create_task(
                _user(
                    await clients.enter_async_context(
                        httpx.AsyncClient(
                            base_url=base_urls[number % len(base_urls)],
                            timeout=timeout,
                            limits=limits,
                            verify=tls,
                        )
                    ),
                    load,
                    number,
                    gate,
                    result,
                    open_streams,
                )
            )
            for number in range(load.users)
        ]
        try:
            await asyncio.wait_for(gate.all_arrived.wait(), timeout=load.setup_timeout)
        except TimeoutError:
            result.error(
                "setup timeout",
                f"{load.users - gate.arrived} users not ready after {load.setup_timeout:.0f}s",
            )
        result.setup_seconds = time.perf_counter() - started
        result.streams_open = open_streams[0]
        if on_start is not None:
            on_start()
        go = time.perf_counter()
        gate.go.set()
        _, pending = await asyncio.wait(users, timeout=load.deadline)
        result.elapsed = time.perf_counter() - go
        for task in pending:
            task.cancel()
        if pending:
            result.error("deadline", f"{len(pending)} users still running after {load.deadline:.0f}s")
            await asyncio.wait(pending)
        for task in users:
            if not task.cancelled() and (error := task.exception()) is not None:
                result.error(f"client bug {type(error).__name__}", repr(error))
    return result


async def _user(
    client: httpx.AsyncClient,
    load: Load,
    number: int,
    gate: _Gate,
    result: LoadResult,
    open_streams: list[int],
) -> None:
    headers = {"Authorization": f"Bearer {issue_token(load.secret, f'user{number}')}"}
    arrived = False
    try:
        response = await client.post("/api/threads", json={"title": f"bench {number}"}, headers=headers)
        if response.status_code != 201:
            result.error(f"POST /api/threads {response.status_code}", response.text[:300])
            return
        thread_id = str(response.json()["thread_id"])
        async with client.stream("GET", f"/api/threads/{thread_id}/events", headers=headers) as stream:
            if stream.status_code != 200:
                await stream.aread()
                result.error(f"GET events {stream.status_code}", stream.text[:300])
                return
            open_streams[0] += 1
            result.peak_streams = max(result.peak_streams, open_streams[0])
            queue: asyncio.Queue[_Event | _End] = asyncio.Queue()
            reader = asyncio.create_task(_read_events(stream, queue))
            try:
                gate.arrive(ready=True)
                arrived = True
                await gate.go.wait()
                last_id = 0
                for _ in range(load.turns):
                    last = await _turn(client, load, thread_id, headers, queue, last_id, result)
                    if last is None:
                        return
                    last_id = last
            finally:
                open_streams[0] -= 1
                reader.cancel()
    except httpx.HTTPError as error:
        result.error(f"transport {type(error).__name__}", repr(error))
    finally:
        if not arrived:
            gate.arrive(ready=False)


async def _turn(
    client: httpx.AsyncClient,
    load: Load,
    thread_id: str,
    headers: dict[str, str],
    queue: asyncio.Queue[_Event | _End],
    last_id: int,
    result: LoadResult,
) -> int | None:
    """One turn; the id of its last event, or `None` (an error was recorded) to stop the user."""
    sent = time.perf_counter()
    try:
        response = await client.post(
            f"/api/threads/{thread_id}/messages", json={"content": PROMPT}, headers=headers
        )
    except httpx.HTTPError as error:
        result.error(f"transport {type(error).__name__} on POST messages", repr(error))
        return None
    post_latency = time.perf_counter() - sent
    if response.status_code != 202:
        result.error(f"POST messages {response.status_code}", response.text[:300])
        return None
    run_id = response.json()["run_id"]
    events: list[_Event] = []
    while True:
        try:
            item = await asyncio.wait_for(queue.get(), timeout=load.stall_timeout)
        except TimeoutError:
            result.error("stalled stream", f"no event for {load.stall_timeout:.0f}s during a turn")
            return None
        if isinstance(item, _End):
            result.error("dropped stream", repr(item.error) if item.error else "the server ended the stream")
            return None
        events.append(item)
        if item.type == "run_finished":
            break
    problem = _check(events, run_id, last_id)
    if problem is not None:
        result.error("missing or wrong event", problem)
        return None
    first_delta = next(event.received for event in events if event.type == "text_delta")
    result.first_delta.append(first_delta - sent)
    result.post_latency.append(post_latency)
    result.turn_latency.append(events[-1].received - sent)
    result.completed_turns += 1
    return events[-1].event_id or last_id


def _check(events: list[_Event], run_id: str, last_id: int) -> str | None:
    """What is wrong with one turn's events, if anything."""
    types = [event.type for event in events]
    ids = [event.event_id for event in events]
    # Ids increase per thread; they need not be consecutive (a run may reserve a block of them).
    # A missing event shows in the turn's shape or in `text_done` against its deltas.
    previous = last_id
    for event_id in ids:
        if event_id is None or event_id <= previous:
            return f"ids {ids} after {last_id}"
        previous = event_id
    deltas = types[len(_HEAD) : -2]
    if tuple(types[: len(_HEAD)]) != _HEAD or types[-2:] != ["text_done", "run_finished"] or not deltas:
        return f"event types {types}"
    if any(delta != "text_delta" for delta in deltas):
        return f"event types {types}"
    if any(event.data.get("run_id") != run_id for event in events):
        return f"an event of another run than {run_id}"
    if (status := events[-1].data.get("status")) != "completed":
        return f"run_finished status {status!r}: {events[-1].data.get('error')!r}"
    text = "".join(str(event.data.get("delta")) for event in events[len(_HEAD) : -2])
    if events[-2].data.get("text") != text:
        return "text_done differs from its deltas"
    return None


async def _read_events(stream: httpx.Response, queue: asyncio.Queue[_Event | _End]) -> None:
    """Parse the SSE stream into `queue`, stamping each event with when it arrived; then an `_End`."""
    event_id: int | None = None
    event_type = "message"
    data: list[str] = []
    try:
        async for line in stream.aiter_lines():
            if not line:
                if data:
                    payload = json.loads("\n".join(data))
                    queue.put_nowait(_Event(time.perf_counter(), event_id, event_type, payload))
                event_id, event_type, data = None, "message", []
                continue
            if line.startswith(":"):
                continue  # a comment: the keep-alive
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                event_id = int(value)
            elif name == "event":
                event_type = value
            elif name == "data":
                data.append(value)
        queue.put_nowait(_End())
    except (httpx.HTTPError, ValueError) as error:
        queue.put_nowait(_End(error))
