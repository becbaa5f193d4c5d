"""Simulated users over HTTP and SSE, in this process, and what they saw; a round's CPU.

Each user has its own `httpx.AsyncClient` (one shared pool scans every connection on each request).
`native`: a thread, its stream open before the start, every turn's events checked (`check_turn`);
`ai-sdk`: a `useChat` client resending the conversation, a turn counting when its text names the order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import ssl
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from web import issue_token

from .servers import SECRET, ServerProcess, core_wait, machine_ticks
from .stats import ratio

PROMPT = "Where is ORD-5678?"
Protocol = Literal["native", "ai-sdk"]
_HEAD = ("run_started", "user_message", "tool_call", "tool_result")
_EXPECTED = "ORD-5678"


@dataclass(frozen=True)
class Load:
    users: int
    turns: int | None = 1
    """Turns per user; `None`: turns until `seconds` have passed (no turn starts after)."""
    seconds: float = 0.0
    protocol: Protocol = "native"
    secret: str = SECRET
    setup_timeout: float = 90.0
    """How long the users have to create their threads and open their streams."""
    deadline: float = 150.0
    """How long the turns may take in all; users not done by then are cut, as errors."""
    stall_timeout: float = 120.0
    """How long a stream may go without an event while its turn runs."""
    turns_per_thread: int | None = None
    """A new thread (native: created, its stream opened; AI SDK: a new chat id) every this many
    turns, all of them during the measured turns; `None`: one thread per user, made before the start."""


@dataclass
class LoadResult:
    users: int
    turns_per_user: int
    streams_open: int = 0
    elapsed: float = 0.0
    """From the start (every user ready) to the last user's end."""
    completed_turns: int = 0
    first_delta: list[float] = field(default_factory=list[float])
    """Seconds from sending the POST to receiving the turn's first text delta."""
    post_latency: list[float] = field(default_factory=list[float])
    turn_latency: list[float] = field(default_factory=list[float])
    """Seconds from sending the POST to the turn's end."""
    errors: Counter[str] = field(default_factory=Counter[str])
    error_samples: dict[str, str] = field(default_factory=dict[str, str])

    @property
    def turns_per_second(self) -> float:
        return self.completed_turns / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def error(self, kind: str, detail: str = "") -> None:
        self.errors[kind] += 1
        self.error_samples.setdefault(kind, detail[:300] or kind)

    def add_errors(self, other: LoadResult, prefix: str) -> None:
        """`other`'s errors (a warm-up's), their kinds prefixed."""
        for kind, count in other.errors.items():
            self.errors[prefix + kind] += count
            self.error_samples.setdefault(prefix + kind, other.error_samples[kind])


@dataclass(frozen=True)
class Event:
    received: float
    """`time.perf_counter()` when its last line arrived."""
    event_id: int | None
    type: str
    data: dict[str, Any]


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[Event]:
    """The events of an SSE stream's lines (comments skipped; the AI SDK's `[DONE]` ends nothing)."""
    event_id: int | None = None
    event_type, data = "message", list[str]()
    async for line in lines:
        if not line:
            if data and data != ["[DONE]"]:
                yield Event(time.perf_counter(), event_id, event_type, json.loads("\n".join(data)))
            event_id, event_type, data = None, "message", []
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                event_id = int(value)
            elif name == "event":
                event_type = value
            elif name == "data":
                data.append(value)


class _Gate:
    """Holds the users until every one is ready (or failed), then lets them go until `stop_at`."""

    def __init__(self, users: int) -> None:
        self.users, self.arrived, self.ready = users, 0, 0
        self.all_arrived, self.go = asyncio.Event(), asyncio.Event()
        self.stop_at = math.inf

    def arrive(self, *, ready: bool) -> None:
        self.arrived += 1
        self.ready += ready
        if self.arrived >= self.users:
            self.all_arrived.set()


async def run_load(
    base_url: str | Sequence[str], load: Load, *, on_start: Callable[[], None] | None = None
) -> LoadResult:
    """Run `load`; `on_start` is called once every user is ready, right before the first turn.

    Given several servers' URLs, user n works on the n-th (round robin): its thread, stream and turns.
    """
    urls = [base_url] if isinstance(base_url, str) else list(base_url)
    result = LoadResult(users=load.users, turns_per_user=load.turns or 0)
    gate = _Gate(load.users)
    timeout = httpx.Timeout(connect=60.0, read=load.stall_timeout, write=60.0, pool=None)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    tls = ssl.create_default_context()  # never used (plain HTTP), built once rather than per client
    async with contextlib.AsyncExitStack() as stack:
        tasks: list[asyncio.Task[None]] = []
        for n in range(load.users):
            client = httpx.AsyncClient(
                base_url=urls[n % len(urls)], timeout=timeout, limits=limits, verify=tls
            )
            user = _user(await stack.enter_async_context(client), f"user{n}", load, gate, result, n)
            tasks.append(asyncio.create_task(user))
        try:
            await asyncio.wait_for(gate.all_arrived.wait(), timeout=load.setup_timeout)
        except TimeoutError:
            result.error(
                "setup timeout",
                f"{load.users - gate.arrived} users not ready after {load.setup_timeout:.0f}s",
            )
        result.streams_open = gate.ready
        if on_start is not None:
            on_start()
        started = time.perf_counter()
        gate.stop_at = started + load.seconds if load.turns is None else math.inf
        gate.go.set()
        _, pending = await asyncio.wait(tasks, timeout=load.deadline)
        result.elapsed = time.perf_counter() - started
        for task in pending:
            task.cancel()
        if pending:
            result.error("deadline", f"{len(pending)} users still running after {load.deadline:.0f}s")
            await asyncio.wait(pending)
        for task in tasks:
            if not task.cancelled() and (error := task.exception()) is not None:
                result.error(f"client bug {type(error).__name__}", repr(error))
    return result


async def _read(stream: httpx.Response, queue: asyncio.Queue[Event | BaseException | None]) -> None:
    """The stream's events into `queue`, then `None` (it ended) or the error it ended with."""
    try:
        async for event in sse_events(stream.aiter_lines()):
            queue.put_nowait(event)
        queue.put_nowait(None)
    except (httpx.HTTPError, ValueError) as error:
        queue.put_nowait(error)


def new_thread(index: int, turn: int, per_thread: int) -> bool:
    """Whether user `index` starts a new thread before its turn `turn` (counted from 0 in the round).

    Users are staggered, so that one turn in `per_thread` starts a thread however few turns each
    does in a round; a user not starting one at its turn 0 is given a thread before the start.
    """
    return (index + turn) % per_thread == 0


async def _user(
    client: httpx.AsyncClient, user_id: str, load: Load, gate: _Gate, result: LoadResult, index: int
) -> None:
    """A user: ready before the start (`before_start`), then its turns, a new thread when `new_thread` says."""
    user = (_Native if load.protocol == "native" else _AiSdk)(client, user_id, load, result)
    per_thread = load.turns_per_thread

    def fresh(turn: int) -> bool:
        return per_thread is not None and new_thread(index, turn, per_thread)

    ready = False
    try:
        async with contextlib.aclosing(user):
            if not fresh(0) and not await user.before_start():
                return
            ready = True
            gate.arrive(ready=True)
            await gate.go.wait()
            done = 0
            while time.perf_counter() < gate.stop_at and (load.turns is None or done < load.turns):
                if fresh(done) and not await user.new_thread():
                    return
                if not await user.turn(result):
                    return
                done += 1
    except (httpx.HTTPError, ValueError) as error:
        result.error(f"transport {type(error).__name__}", repr(error))
    finally:
        if not ready:  # failed before the start: the others must not wait for it
            gate.arrive(ready=False)


class _User:
    """One simulated user's connection: a thread to begin with, new threads, turns, each `False` (its
    error recorded) to stop the user."""

    def __init__(self, client: httpx.AsyncClient, user_id: str, load: Load, result: LoadResult) -> None:
        self.client, self.load, self.result = client, load, result
        self.headers = {"Authorization": f"Bearer {issue_token(load.secret, user_id)}"}
        self.user_id = user_id

    async def before_start(self) -> bool:
        return await self.new_thread()

    async def new_thread(self) -> bool:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None


class _Native(_User):
    """The native API: a thread with its stream open (every turn's events read from it), each turn posted."""

    def __init__(self, client: httpx.AsyncClient, user_id: str, load: Load, result: LoadResult) -> None:
        super().__init__(client, user_id, load, result)
        self.stack = contextlib.AsyncExitStack()
        self.queue: asyncio.Queue[Event | BaseException | None] = asyncio.Queue()
        self.thread_id, self.last_id = "", 0

    async def new_thread(self) -> bool:
        await self.stack.aclose()
        made = await self.client.post(
            "/api/threads", json={"title": f"bench {self.user_id}"}, headers=self.headers
        )
        if made.status_code != 201:
            self.result.error(f"POST /api/threads {made.status_code}", made.text)
            return False
        thread_id = str(made.json()["thread_id"])
        url = f"/api/threads/{thread_id}/events"
        stream = await self.stack.enter_async_context(self.client.stream("GET", url, headers=self.headers))
        if stream.status_code != 200:
            await stream.aread()
            self.result.error(f"GET events {stream.status_code}", stream.text)
            return False
        self.queue, self.thread_id, self.last_id = asyncio.Queue(), thread_id, 0
        self.stack.callback(asyncio.create_task(_read(stream, self.queue)).cancel)
        return True

    async def turn(self, result: LoadResult) -> bool:
        """One turn, its events checked (`check_turn`)."""
        load, sent = self.load, time.perf_counter()
        try:
            response = await self.client.post(
                f"/api/threads/{self.thread_id}/messages", json={"content": PROMPT}, headers=self.headers
            )
        except httpx.HTTPError as error:
            result.error(f"transport {type(error).__name__} on POST messages", repr(error))
            return False
        posted = time.perf_counter() - sent
        if response.status_code != 202:
            result.error(f"POST messages {response.status_code}", response.text)
            return False
        run_id = response.json()["run_id"]
        events: list[Event] = []
        while not events or events[-1].type != "run_finished":
            try:
                item = await asyncio.wait_for(self.queue.get(), timeout=load.stall_timeout)
            except TimeoutError:
                result.error("stalled stream", f"no event for {load.stall_timeout:.0f}s during a turn")
                return False
            if not isinstance(item, Event):
                result.error("dropped stream", repr(item) if item else "the server ended the stream")
                return False
            events.append(item)
        if (problem := check_turn(events, run_id, self.last_id)) is not None:
            result.error("missing or wrong event", problem)
            return False
        result.first_delta.append(next(e.received for e in events if e.type == "text_delta") - sent)
        result.post_latency.append(posted)
        result.turn_latency.append(events[-1].received - sent)
        result.completed_turns += 1
        self.last_id = events[-1].event_id or self.last_id
        return True

    async def aclose(self) -> None:
        await self.stack.aclose()


def check_turn(events: Sequence[Event], run_id: str, last_id: int) -> str | None:
    """What is wrong with one demo turn's events after event `last_id`, if anything."""
    types = [event.type for event in events]
    ids = [event.event_id for event in events]
    # Ids increase per thread; they need not be consecutive (a run may reserve a block of them).
    previous = last_id
    for event_id in ids:
        if event_id is None or event_id <= previous:
            return f"ids {ids} after {last_id}"
        previous = event_id
    deltas = types[len(_HEAD) : -2]
    if (tuple(types[: len(_HEAD)]), types[-2:]) != (_HEAD, ["text_done", "run_finished"]) or (
        not deltas or any(delta != "text_delta" for delta in deltas)
    ):
        return f"event types {types}"
    if any(event.data.get("run_id") != run_id for event in events):
        return f"an event of another run than {run_id}"
    if (status := events[-1].data.get("status")) != "completed":
        return f"run_finished status {status!r}: {events[-1].data.get('error')!r}"
    if events[-2].data.get("text") != "".join(str(e.data.get("delta")) for e in events[len(_HEAD) : -2]):
        return "text_done differs from its deltas"
    return None


class _AiSdk(_User):
    """A `useChat` client: one POST a turn, the conversation resent, a turn counting when its text names
    the order."""

    def __init__(self, client: httpx.AsyncClient, user_id: str, load: Load, result: LoadResult) -> None:
        super().__init__(client, user_id, load, result)
        self.chat_id, self.history = str(uuid.uuid4()), list[dict[str, Any]]()

    async def before_start(self) -> bool:
        """With new chats every so many turns, a chat with a turn in it (its errors prefixed `setup: `)."""
        if self.load.turns_per_thread is None:
            return True
        setup = LoadResult(users=1, turns_per_user=1)
        if not await self.turn(setup):
            self.result.add_errors(setup, "setup: ")
            return False
        return True

    async def new_thread(self) -> bool:
        self.chat_id, self.history = str(uuid.uuid4()), []
        return True

    async def turn(self, result: LoadResult) -> bool:
        message = {"id": str(uuid.uuid4()), "role": "user", "parts": [{"type": "text", "text": PROMPT}]}
        body = {"id": self.chat_id, "messages": [*self.history, message], "trigger": "submit-message"}
        sent = time.perf_counter()
        chunks: list[dict[str, Any]] = []
        first = math.nan
        async with self.client.stream("POST", "/api/ai-sdk/chat", json=body, headers=self.headers) as stream:
            if stream.status_code != 200:
                await stream.aread()
                result.error(f"POST chat {stream.status_code}", stream.text)
                return False
            async for event in sse_events(stream.aiter_lines()):
                if event.data.get("type") == "text-delta" and math.isnan(first):
                    first = event.received - sent
                chunks.append(event.data)
        reply = assistant_message(chunks)
        text = "".join(str(part.get("text", "")) for part in reply["parts"] if part["type"] == "text")
        if not chunks or chunks[-1].get("type") != "finish" or _EXPECTED not in text:
            result.error("wrong turn", json.dumps(chunks[-3:]))
            return False
        self.history += [message, reply]
        if not math.isnan(first):
            result.first_delta.append(first)
        result.turn_latency.append(time.perf_counter() - sent)
        result.completed_turns += 1
        return True


def assistant_message(chunks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The `UIMessage` `useChat` builds from one turn's chunks: steps, tool calls with results, text."""
    parts: list[dict[str, Any]] = []
    tools: dict[str, dict[str, Any]] = {}
    texts: dict[str, dict[str, Any]] = {}
    message_id = str(uuid.uuid4())
    for chunk in chunks:
        match chunk.get("type"):
            case "start" if chunk.get("messageId"):
                message_id = str(chunk["messageId"])
            case "start-step":
                parts.append({"type": "step-start"})
            case "tool-input-available":
                part = {
                    "type": f"tool-{chunk['toolName']}",
                    "toolCallId": chunk["toolCallId"],
                    "state": "input-available",
                    "input": chunk.get("input"),
                }
                tools[str(chunk["toolCallId"])] = part
                parts.append(part)
            case "tool-output-available" if str(chunk.get("toolCallId")) in tools:
                tools[str(chunk["toolCallId"])].update(state="output-available", output=chunk.get("output"))
            case "text-start":
                texts[str(chunk["id"])] = part = {"type": "text", "text": "", "state": "done"}
                parts.append(part)
            case "text-delta" if str(chunk.get("id")) in texts:
                texts[str(chunk["id"])]["text"] += str(chunk.get("delta", ""))
            case _:
                pass
    return {"id": message_id, "role": "assistant", "parts": parts}


@dataclass(frozen=True)
class Measured:
    """A load run against some servers, and the CPU spent while its turns ran."""

    result: LoadResult
    server_cpu: float
    """CPU seconds the servers used from the start to `settle` after the last turn."""
    client_cpu: float
    """CPU seconds this process (the clients) used meanwhile."""
    server_wait: float = 0.0
    """Seconds the (first) server's main thread waited for its core during the turns."""
    client_wait: float = 0.0
    machine_busy: float = 0.0
    """The share of all the machine's cores busy during the turns, whoever used them."""

    @property
    def cpu_per_turn(self) -> float:
        return ratio(self.server_cpu, self.result.completed_turns)

    @property
    def server_cores(self) -> float:
        """The servers' CPU over the turns' wall time: 1.0 is one core, all the time."""
        return ratio(self.server_cpu, self.result.elapsed)

    @property
    def client_cores(self) -> float:
        return ratio(self.client_cpu, self.result.elapsed)


async def measure(servers: Sequence[ServerProcess], load: Load, *, settle: float = 0.0) -> Measured:
    """`load` over `servers` (round robin), with their CPU and this process's read around the turns.

    `settle`: seconds after the last turn before the servers' CPU is read (a trace exporter's batch).
    """
    before: list[tuple[float, float, float, float, tuple[int, int]]] = []

    def start() -> None:
        cpu = sum(server.cpu_seconds() for server in servers)
        before.append(
            (cpu, time.process_time(), core_wait(servers[0].pid), core_wait("self"), machine_ticks())
        )

    result = await run_load([server.base_url for server in servers], load, on_start=start)
    server_cpu, client_cpu, server_wait, client_wait, (start_busy, start_total) = before[0]
    client_cpu = time.process_time() - client_cpu
    waits = (core_wait(servers[0].pid) - server_wait, core_wait("self") - client_wait)
    busy, total = machine_ticks()
    await asyncio.sleep(settle)
    server_cpu = sum(server.cpu_seconds() for server in servers) - server_cpu
    machine = (busy - start_busy) / (total - start_total) if total > start_total else 0.0
    return Measured(result, server_cpu, client_cpu, *waits, machine_busy=machine)
