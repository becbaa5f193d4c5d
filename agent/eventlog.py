"""The sink that appends a run's events to its thread's log, then publishes them to live followers.

Writes are group-committed: events emitted while a write is in flight go out together in the
next one, so a model streaming word by word costs a few transactions per second, not one per
word, and no event waits longer than one write. An event is published (to SSE followers) only
after it is durable, so a client never holds an id the log does not have.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from store import EventLog, LoggedEvent, NewEvent
from stream import StoredEvent, StreamEvent, event_data, event_from_data

__all__ = ("EventLogSink", "Publisher", "new_events", "stored_events")

Publisher = Callable[[str, Sequence[StoredEvent]], None]
"""Tells live followers of a thread about events that are now in its log."""


def new_events(events: Sequence[StreamEvent]) -> list[NewEvent]:
    return [NewEvent(event.run_id, event.type, event_data(event)) for event in events]


def stored_events(logged: Sequence[LoggedEvent]) -> list[StoredEvent]:
    return [StoredEvent(item.event_id, event_from_data(item.type, item.data)) for item in logged]


class EventLogSink:
    """A `stream.Sink` writing to one thread's event log."""

    def __init__(self, log: EventLog, thread_id: str, *, publish: Publisher | None = None) -> None:
        self._log = log
        self._thread_id = thread_id
        self._publish = publish
        self._buffer: list[StreamEvent] = []
        self._writer: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None

    async def emit(self, event: StreamEvent) -> None:
        self._raise_failure()
        self._buffer.append(event)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_all(), name=f"event-log {self._thread_id}")

    async def flush(self) -> None:
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)
        self._raise_failure()
        if self._buffer:
            await self._write_all()
            self._raise_failure()

    async def take_pending(self) -> list[StreamEvent]:
        """Wait for the write in flight, then hand over what is buffered, to be written by the caller.

        A checkpoint writes them in its own transaction (`append_events`) and then calls
        `published`: one transaction instead of two, and the events stay in order.
        """
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)
        self._raise_failure()
        pending, self._buffer = self._buffer, []
        return pending

    def published(self, logged: Sequence[LoggedEvent], events: Sequence[StreamEvent]) -> None:
        """Publish events a checkpoint wrote (see `take_pending`), now that they are committed."""
        if self._publish is not None and logged:
            self._publish(
                self._thread_id,
                [StoredEvent(item.event_id, event) for item, event in zip(logged, events, strict=True)],
            )

    async def _write_all(self) -> None:
        while self._buffer and self._failure is None:
            batch, self._buffer = self._buffer, []
            items = new_events(batch)
            try:
                logged = await self._log.append(self._thread_id, items)
            except Exception as error:
                # Kept for the next emit or flush to raise: a background task has no one to tell.
                self._failure = error
                return
            self.published(logged, batch)

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise RuntimeError(f"the event log of thread {self._thread_id!r} failed") from self._failure
