"""The sink that gives a run's events their ids, publishes them live and appends them to the log.

Deliberate choices:

- **Ids from a reserved block.** A run reserves a block of ids from its thread's counter once
  (more when it runs out), so an event has its id the moment it is emitted, without a database
  round trip. Ids increase per thread and are never handed out twice; ids a run leaves unused
  are gaps, never reused.
- **Streaming events are published at once**, before they are stored, so live followers see
  text as the model writes it. They are stored by the next checkpoint, in its own transaction,
  or by a background write at most `flush_after` seconds later, whichever comes first. The
  broker keeps a thread's recent events, so a follower who subscribes between publication and
  storage still gets them (see `web.broker`). A crash loses only unstored events of the node in
  flight, which the recovered run streams again, under new ids.
- **Control events** (`approval_required`, `run_finished`) are published only once stored, and
  so is everything emitted after one: a client that sees `approval_required` can decide at once,
  and one that sees `run_finished` finds the run's whole log stored.
- **Trace ids are stamped once**, by `TraceStampSink` in front of every sink of a traced run, so
  the log, live followers and any other sink see the same event, `trace_id` included.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from store import DatabaseUnavailable, EventLog, LeaseLost, LoggedEvent, NewEvent
from stream import Sink, StoredEvent, StreamEvent, event_data, event_from_data

__all__ = ("CONTROL_EVENTS", "EventLogSink", "Publisher", "TraceStampSink", "new_events", "stored_events")

Publisher = Callable[[str, Sequence[StoredEvent]], None]
"""Tells live followers of a thread about its events, in id order."""

CONTROL_EVENTS = frozenset({"approval_required", "run_finished"})
"""Events published only once stored: a client acts on them (decides, reads the thread)."""


def new_events(events: Sequence[StoredEvent]) -> list[tuple[int, NewEvent]]:
    return [
        (stored.event_id, NewEvent(stored.event.run_id, stored.event.type, event_data(stored.event)))
        for stored in events
    ]


def stored_events(logged: Sequence[LoggedEvent]) -> list[StoredEvent]:
    return [StoredEvent(item.event_id, event_from_data(item.type, item.data)) for item in logged]


class EventLogSink:
    """A `stream.Sink` for one thread's events; see the module's notes."""

    def __init__(
        self,
        log: EventLog,
        thread_id: str,
        *,
        publish: Publisher | None = None,
        block: int = 128,
        flush_after: float = 0.25,
        reserved: tuple[int, int] | None = None,
        held: tuple[str, str] | None = None,
    ) -> None:
        """`reserved`: a block of ids reserved already, as (first id, count).

        `held`: `(run_id, worker_id)` when the events are a run's as that worker drives it: once
        the run is taken over or cancelled, storing them fails with `store.LeaseLost`.
        """
        self._log = log
        self._thread_id = thread_id
        self._publish = publish
        self._block = block
        self._flush_after = flush_after
        self._next_id, self._end_id = (
            (0, -1) if reserved is None else (reserved[0], reserved[0] + reserved[1] - 1)
        )
        self._last_id = 0
        self._unstored: list[StoredEvent] = []
        self._held: list[StoredEvent] = []
        self._writer: asyncio.Task[None] | None = None
        self._writing = False
        self._failure: BaseException | None = None
        self._held_by = held

    @property
    def last_id(self) -> int:
        """The id of the newest event emitted so far (0 before the first)."""
        return self._last_id

    async def emit(self, event: StreamEvent) -> None:
        self._raise_failure()
        if self._next_id > self._end_id:
            self._next_id = await self._log.reserve(self._thread_id, self._block)
            self._end_id = self._next_id + self._block - 1
        stored = StoredEvent(self._next_id, event)
        self._last_id = self._next_id
        self._next_id += 1
        self._unstored.append(stored)
        if self._held or event.type in CONTROL_EVENTS:
            self._held.append(stored)
        elif self._publish is not None:
            self._publish(self._thread_id, [stored])
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_later(), name=f"event-log {self._thread_id}")

    async def flush(self) -> None:
        """Store every event emitted so far, then publish the held ones."""
        pending = await self.take_pending()
        if pending:
            await self._log.insert(self._thread_id, new_events(pending), held=self._held_by)
        self.stored(pending)

    async def take_pending(self) -> list[StoredEvent]:
        """Hand over the events not stored yet, for the caller to store in its own transaction.

        The caller then calls `stored` once its transaction committed.
        """
        writer = self._writer
        if writer is not None and not writer.done():
            if self._writing:
                await asyncio.shield(writer)  # its events go first, in order
            else:
                writer.cancel()  # still waiting: it has taken nothing
        self._raise_failure()
        pending, self._unstored = self._unstored, []
        return pending

    async def aclose(self) -> None:
        """Stop the background writer: a pending wait is dropped, a write in flight is awaited.

        Events not stored by then are abandoned, as a crash would lose them.
        """
        writer = self._writer
        if writer is None or writer.done():
            return
        if self._writing:
            await asyncio.wait([writer])
        else:
            writer.cancel()
            await asyncio.wait([writer])

    def put_back(self, events: Sequence[StoredEvent]) -> None:
        """Return events `take_pending` handed over whose transaction failed."""
        self._unstored[:0] = events

    def stored(self, events: Sequence[StoredEvent]) -> None:
        """`events` are committed: publish the held events among them, in order."""
        if not events or not self._held:
            return
        newest = events[-1].event_id
        ready = [stored for stored in self._held if stored.event_id <= newest]
        self._held = self._held[len(ready) :]
        if ready and self._publish is not None:
            self._publish(self._thread_id, ready)

    async def _write_later(self) -> None:
        await asyncio.sleep(self._flush_after)
        pending, self._unstored = self._unstored, []
        if not pending:
            return
        self._writing = True
        try:
            await self._log.insert(self._thread_id, new_events(pending), held=self._held_by)
        except Exception as error:
            # Kept for the next emit or flush to raise: a background task has no one to tell.
            self._failure = error
            return
        finally:
            self._writing = False
        self.stored(pending)

    def _raise_failure(self) -> None:
        if self._failure is None:
            return
        if isinstance(self._failure, LeaseLost):
            # The run was taken over or cancelled: the step stops quietly, as after any fenced write.
            raise LeaseLost(str(self._failure))
        if isinstance(self._failure, DatabaseUnavailable):
            # Kept as what it is: the run is to be retried, not failed.
            raise DatabaseUnavailable(
                f"storing the events of thread {self._thread_id!r} failed: {self._failure}"
            )
        raise RuntimeError(f"the event log of thread {self._thread_id!r} failed") from self._failure


class TraceStampSink:
    """A `stream.Sink` that sets `trace_id` on every event without one, then passes it to `inner`."""

    def __init__(self, inner: Sink, trace_id: str) -> None:
        self._inner = inner
        self._update = {"trace_id": trace_id}

    async def emit(self, event: StreamEvent) -> None:
        # A shallow copy without validation: a few microseconds, paid once per event.
        await self._inner.emit(event if event.trace_id is not None else event.model_copy(update=self._update))

    async def flush(self) -> None:
        await self._inner.flush()
