"""The sink that gives a run's events their ids, stores them in the log, then publishes them live.

Deliberate choices (the design note is "The event log" in `docs/agent.md`):

- **Ids from a reserved block.** A run reserves a block of ids from its thread's counter once
  (more when it runs out), so an event has its id the moment it is emitted, without a database
  round trip. Ids increase per thread and are never handed out twice; ids a run leaves unused
  are gaps, never reused.
- **Stored, then published.** No event reaches a live follower before it is committed: what a
  connected client shows is always what a client replaying the log shows, whatever crashes, and
  no client needs to drop anything. The run does not wait for the write: `emit` queues the event
  and returns.
- **Group commit.** One background writer stores the queued events in one transaction, at once
  when it was idle; events emitted while it writes wait for its next transaction, which starts no
  sooner than `interval` after the previous one: a model streaming a token every few milliseconds
  costs a transaction per interval, not per token, and the first event after a pause is not
  delayed. A checkpoint takes the queued events into its own transaction instead. Either way
  they are published, in id order, once their transaction commits.
- **The first word is not held back while the process is quiet.** The first `text_delta` of a
  text part starts the writer's transaction at once, whatever the interval, while `hurry()` says
  so: a fast model answering right after a checkpoint would otherwise have its whole reply wait
  for the interval, or for the run's last checkpoint. That is one more transaction per text part
  at most; a busy process spends none (`run_step` hurries while it drives few runs), as
  PostgreSQL's `commit_delay` waits only when other transactions are active. While the process
  is so quiet and a writer's transaction is in flight, each event emitted lets the event loop
  turn once: a model streaming without pause would otherwise keep the loop until its next wait,
  often the run's last checkpoint, and a committed first word would wait for it unread.
- **A tool's call and result wait for their checkpoint.** Neither the writer nor `flush` stores a
  `tool_result`, or a `tool_call` of the run's own, nor anything emitted after it: only a
  checkpoint does (`take_pending`), in the transaction that stores the call or the results in the
  conversation. A call or result a client saw is then always one the model continues from,
  whatever crashes. Until that checkpoint they are `held`.
- **A run's end waits for the run's end transaction.** Neither the writer nor `flush` stores a
  `run_finished` either: the transaction that ends the run (its last checkpoint, or `Runs.finish`)
  takes it (`take_pending`), so a run's end is stored, and shown, if and only if the run ended as it
  says, whatever crashes or failed commits. An end whose transaction failed is `held` and dropped.
- **Fenced.** With the run's `lease_owner`, a write stores nothing unless that worker still holds
  the run's lease (`store.LeaseLost`): a worker paused past its lease stores no event once it resumes.
- **Events arrive tagged.** A run makes each event with its tags (`run_id`, `agent`, `trace_id`,
  inside a delegated run `parent_tool_call_id`: `agent.withdrawals.EventTags`), so no sink copies an
  event to add one: the log, live followers and any other sink see the same object.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from store import DatabaseUnavailable, EventLog, LeaseLost, LoggedEvent, NewEvent, Run
from stream import (
    RunFinished,
    Sink,
    StoredEvent,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolResult,
    event_data,
    event_from_data,
)

__all__ = (
    "REPEATABLE",
    "EventLogOptions",
    "EventLogSink",
    "Publisher",
    "SkipLogged",
    "logged_tool_events",
    "new_event",
    "new_events",
    "stored_events",
)

Publisher = Callable[[str, Sequence[StoredEvent]], None]
"""Tells live followers of a thread about its stored events, in id order."""


def new_events(events: Sequence[StoredEvent]) -> list[tuple[int, NewEvent]]:
    return [(s.event_id, NewEvent(s.event.run_id, s.event.type, s.encoded())) for s in events]


def new_event(event: StreamEvent) -> NewEvent:
    """`event` as the store keeps it."""
    return NewEvent(event.run_id, event.type, event_data(event))


def stored_events(logged: Sequence[LoggedEvent]) -> list[StoredEvent]:
    return [StoredEvent(item.event_id, event_from_data(item.type, item.data)) for item in logged]


def _never() -> bool:
    return False


def _always() -> bool:
    return True


@dataclass(frozen=True, kw_only=True)
class EventLogOptions:
    """How an `EventLogSink` reserves, paces and publishes; the same for every run of a runtime."""

    publish: Publisher | None = None
    """Tells live followers about stored events."""
    block: int = 128
    """How many ids a run reserves at a time."""
    interval: float = 0.05
    """The least time, in seconds, between the starts of two transactions of the writer (or a checkpoint's)."""
    pace: Callable[[], float] | None = None
    """The least time between two transactions now, asked at each (`None`: `interval`): a busy
    process's writers wait longer, each transaction grouping more events."""
    hurry: Callable[[], bool] = _always
    """Whether the first delta of a text part is stored at once, not `interval` after the previous
    transaction; asked when one is emitted."""
    quiet: Callable[[], bool] = _never
    """Whether the process drives few runs, so a transaction may run where it is quickest rather
    than where a busy process's writer groups more events (`EventLog.insert(quiet=)`); asked at
    each transaction."""


class EventLogSink:
    """A `stream.Sink` for one run's events; see the module's notes."""

    def __init__(
        self,
        log: EventLog,
        run: Run,
        *,
        reserved: tuple[int, int] | None = None,
        last_id: int = 0,
        options: EventLogOptions = EventLogOptions(),
    ) -> None:
        """Store `run`'s events in its thread's log while the run's `lease_owner` (if any) holds it.

        `reserved`: a block of ids reserved already, as (first id, count). `last_id`: the newest id
        stored for the run already (its opening events, stored by the queueing just before): that
        transaction counts as the writer's previous one, so its next starts no sooner than
        `options.interval` after it, as after any other.
        """
        thread_id, run_id, worker_id = run.thread_id, run.run_id, run.lease_owner
        publish, block, interval = options.publish, options.block, options.interval
        hurry, quiet = options.hurry, options.quiet
        self._log = log
        self._thread_id = thread_id
        self._publish = publish
        self._block = block
        self._run_id = run_id
        self._worker_id = worker_id
        self._next_id, self._end_id = (
            (0, -1) if reserved is None else (reserved[0], reserved[0] + reserved[1] - 1)
        )
        self._last_id = last_id
        self._unstored: list[StoredEvent] = []
        self._interval = interval
        self._paced = options.pace
        self._writer: asyncio.Task[None] | None = None
        self._writing = False
        """The writer's transaction is in flight (else it waits for its turn, holding nothing)."""
        self._next_write = asyncio.get_running_loop().time() + interval if last_id else 0.0
        """When the writer may start its next transaction (the event loop's clock)."""
        self._taken = False
        """A caller's transaction holds events `take_pending` handed over: the writer waits for it."""
        self._failure: BaseException | None = None
        self._hurry_first_words = hurry
        self._quiet = quiet
        self._parts: set[str] = set()
        """The text parts whose first delta was emitted."""
        self.writes = 0
        """How many transactions of its own the writer committed (for tests and benchmarks)."""

    @property
    def last_id(self) -> int:
        """The id of the newest event emitted so far (0 before the first)."""
        return self._last_id

    async def emit(self, event: StreamEvent) -> None:
        self._raise_failure()
        if self._next_id > self._end_id:
            self._next_id = await self._log.reserve(self._thread_id, self._block)
            self._end_id = self._next_id + self._block - 1
        stored = StoredEvent(self._next_id, event, event_data(event))  # for the log and the stream alike
        self._last_id = self._next_id
        self._next_id += 1
        self._unstored.append(stored)
        if isinstance(event, TextDelta) and event.part_id not in self._parts:
            self._parts.add(event.part_id)
            if self._hurry_first_words():
                self._hurry()
        self._start_writer()
        if self._writing and self._hurry_first_words():
            await asyncio.sleep(0)  # the transaction's answer is read, and published, once it is in

    async def flush(self) -> None:
        """Store every event emitted so far but the `held` ones, and publish them."""
        pending = await self.take_pending()
        ready = pending[: _ready(pending)]
        try:
            if ready:
                await self._log.insert(
                    self._thread_id,
                    new_events(ready),
                    run_id=self._run_id,
                    worker_id=self._worker_id,
                    quiet=self._quiet(),
                )
        except BaseException:
            self.put_back(pending)
            raise
        self._unstored[:0] = pending[len(ready) :]
        self.stored(ready)

    @property
    def held(self) -> int:
        """How many events wait for a checkpoint: a tool's result or the run's end not stored yet, and
        all after it."""
        return len(self._unstored) - _ready(self._unstored)

    def drop_held(self) -> int:
        """Forget the `held` events (a run failing before the checkpoint that was to store them, or
        whose end's transaction failed: nobody saw them); their ids stay unused. Returns how many there were."""
        dropped = self.held
        del self._unstored[len(self._unstored) - dropped :]
        return dropped

    async def take_pending(self, *, results: bool = True) -> list[StoredEvent]:
        """Hand over the events not stored yet, for the caller to store in its own transaction;
        without `results`, only those before the first tool result (a checkpoint storing calls only).

        The caller then calls `stored` once its transaction committed, or `put_back` if it failed;
        until then the background writer stores nothing, so events are published in id order.
        """
        self._taken = True
        writer = self._writer
        if writer is not None and not writer.done():
            if self._writing:
                # Its transaction holds earlier events: they commit, and are published, first.
                await asyncio.shield(writer)
            else:
                writer.cancel()  # waiting for its turn: it holds nothing
        try:
            self._raise_failure()
        except BaseException:
            self._taken = False
            raise
        if results:
            pending, self._unstored = self._unstored, []
        else:
            cut = _before_results(self._unstored)
            pending, self._unstored = self._unstored[:cut], self._unstored[cut:]
        return pending

    async def take_through(self, stored: Callable[[StreamEvent], bool]) -> list[StoredEvent]:
        """`take_pending`, up to the first event only a checkpoint of the run's own may store that
        `stored` does not claim: a checkpoint of a delegated run's conversation takes the results it
        stores, and what comes before the first it does not. The rest stays pending, in order."""
        pending = await self.take_pending()
        cut = next(
            (i for i, item in enumerate(pending) if _held(item.event) and not stored(item.event)),
            len(pending),
        )
        self._unstored[:0] = pending[cut:]
        return pending[:cut]

    def put_back(self, events: Sequence[StoredEvent]) -> None:
        """Return events `take_pending` handed over whose transaction failed."""
        self._unstored[:0] = events
        self._taken = False

    def stored(self, events: Sequence[StoredEvent]) -> None:
        """The events `take_pending` handed over are committed: publish them, in order."""
        self._taken = False
        if events:
            self._next_write = asyncio.get_running_loop().time() + self._pace()
            if self._publish is not None:
                self._publish(self._thread_id, events)
        self._start_writer()

    async def aclose(self) -> None:
        """Wait for a write in flight; events not stored by then are abandoned, as a crash would lose them."""
        writer = self._writer
        if writer is not None and not writer.done():
            if not self._writing:
                writer.cancel()
            await asyncio.wait([writer])
        # A cancelled writer keeps its CancelledError, whose traceback holds the writer's frame and
        # so this sink: let go of it, so that reference counting frees the run's objects now.
        self._writer = None

    def _hurry(self) -> None:
        """Let the writer's next transaction start now, not `interval` after its previous one."""
        self._next_write = 0.0
        writer = self._writer
        if writer is not None and not writer.done() and not self._writing:
            writer.cancel()  # waiting for its turn, it holds nothing: a new writer starts at once
            self._writer = None

    def _start_writer(self) -> None:
        idle = self._writer is None or self._writer.done()
        if idle and _ready(self._unstored) and not self._taken and self._failure is None:
            self._writer = asyncio.create_task(self._write(), name=f"event-log {self._thread_id}")

    async def _write(self) -> None:
        # Group commit: each transaction stores everything queued when it starts.
        loop = asyncio.get_running_loop()
        while True:
            wait = self._next_write - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            ready = _ready(self._unstored)
            if not ready or self._taken:
                return
            batch, self._unstored = self._unstored[:ready], self._unstored[ready:]
            quiet = self._quiet()
            self._next_write = loop.time() + self._pace()
            self._writing = True
            try:
                await self._log.insert(
                    self._thread_id,
                    new_events(batch),
                    run_id=self._run_id,
                    worker_id=self._worker_id,
                    quiet=quiet,
                )
            except Exception as error:
                # Kept for the next emit or flush to raise: a background task has no one to tell.
                # The batch is dropped: it never reached anyone, as if the process had died.
                self._failure = error
                return
            finally:
                self._writing = False
            self.writes += 1
            if self._publish is not None:
                self._publish(self._thread_id, batch)
            if self._taken:
                return  # a checkpoint waits for this write, and takes what is queued

    def _pace(self) -> float:
        """The least time until the writer's next transaction, as busy as the process is now."""
        return self._interval if self._paced is None else self._paced()

    def _raise_failure(self) -> None:
        failure = self._failure
        if failure is None:
            return
        if isinstance(failure, LeaseLost):
            raise LeaseLost(str(failure))  # another worker drives the run: stop quietly
        if isinstance(failure, DatabaseUnavailable):
            # Kept as what it is: the run is to be retried, not failed.
            raise DatabaseUnavailable(f"storing the events of thread {self._thread_id!r} failed: {failure}")
        raise RuntimeError(f"the event log of thread {self._thread_id!r} failed") from failure


def _before_results(events: Sequence[StoredEvent]) -> int:
    """How many of `events` come before the first tool result."""
    return next((i for i, stored in enumerate(events) if isinstance(stored.event, ToolResult)), len(events))


def _ready(events: Sequence[StoredEvent]) -> int:
    """How many of `events` come before the first tool result, the first call of the run's own
    (not a delegated run's) or the run's end: what a store other than a checkpoint may take."""
    return next((index for index, stored in enumerate(events) if _held(stored.event)), len(events))


def _held(event: StreamEvent) -> bool:
    """Whether only the checkpoint storing what `event` shows (or the run's end) may store it."""
    match event:
        case ToolResult() | ToolCall(parent_tool_call_id=None) | RunFinished():
            return True
        case _:
            return False


REPEATABLE = ("tool_call", "tool_result")
"""What a recovered attempt of a run may emit again: the calls and results of a node it re-runs."""


async def logged_tool_events(log: EventLog, thread_id: str, run_id: str) -> set[tuple[str, str]]:
    """`(type, tool_call_id)` of every tool call and result the run `run_id` stored already."""
    logged: set[tuple[str, str]] = set()
    for stored in stored_events(await log.of_run(thread_id, run_id, types=REPEATABLE)):
        match stored.event:
            case ToolCall(tool_call_id=tool_call_id) | ToolResult(tool_call_id=tool_call_id):
                logged.add((stored.event.type, tool_call_id))
            case _:
                pass
    return logged


class SkipLogged:
    """A `stream.Sink` that drops the tool calls and results in `logged`, and passes the rest to `inner`.

    A recovered run re-runs the node a crash interrupted: its calls, made again, answer from the
    ledger, and the model may call the same tools again. Whatever an earlier attempt stored is not
    emitted twice, so every client shows each call and each result once.
    """

    def __init__(self, inner: Sink, logged: set[tuple[str, str]]) -> None:
        self._inner = inner
        self._logged = logged

    async def emit(self, event: StreamEvent) -> None:
        match event:
            case ToolCall(tool_call_id=tool_call_id) | ToolResult(tool_call_id=tool_call_id):
                if (event.type, tool_call_id) in self._logged:
                    return
            case _:
                pass
        await self._inner.emit(event)

    async def flush(self) -> None:
        await self._inner.flush()
