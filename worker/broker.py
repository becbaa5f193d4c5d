"""In-process publish/subscribe of a thread's logged events, for live SSE followers.

The step function publishes a thread's events as soon as they are stored (`agent.Publisher`, see
`agent.eventlog`); every subscription of that thread gets them in its own bounded buffer.
Deliberate choices:

- Publishing never blocks and never waits for a subscriber: a run streams at the speed of the
  model, not of the slowest client.
- A subscriber whose buffer is full is *dropped*: it is told so on its next `next_batch()`
  (`SubscriberDropped`) and reads what it missed from the log, which holds every event, then
  subscribes again. Dropping loses nothing, since the log is the source of truth; the broker is
  only a doorbell that also carries the events to spare the database a read.
- **Nothing is kept for a thread nobody follows.** Every published event is stored before it is
  published and every new follower replays the log after subscribing, so a window of recent
  events would only duplicate what that replay reads; a thread's state (its followers and the
  newest id published while followed) goes when its last follower leaves. Memory follows the open
  streams, not the threads ever active (a per-thread cache grew a soaking server steadily: see
  "The broker keeps nothing for an unfollowed thread" in `docs/benchmarks.md`).
- Ids only go up: while a thread is followed, an event whose id is not above the newest published
  is dropped (a copy of one already published, e.g. relayed from the log after this process
  published it).
- The broker knows only this process. Events another process stores (several servers on one
  PostgreSQL) are read from the log and published here by `worker.relay` when notified; `position`
  says from where to read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Generator, Sequence
from contextlib import contextmanager

from stream import StoredEvent

__all__ = ("DEFAULT_BUFFER", "Broker", "SubscriberDropped", "Subscription")

logger = logging.getLogger(__name__)

DEFAULT_BUFFER = 1024
"""Events a subscriber may fall behind by before it is dropped."""


class SubscriberDropped(Exception):
    """The subscriber fell too far behind; it must read the missed events from the log."""


class Subscription:
    """One follower's buffer of a thread's live events."""

    def __init__(self, thread_id: str, capacity: int, position: int = 0) -> None:
        self.thread_id = thread_id
        self.position = position
        """The newest id the follower has (it updates it): every event up to it reached it."""
        self._capacity = capacity
        self._buffer: list[StoredEvent] = []
        self._ready = asyncio.Event()
        self.dropped = False

    def offer(self, events: Sequence[StoredEvent]) -> bool:
        """Buffer `events`; False (and the subscription dropped) when they do not fit."""
        if len(self._buffer) + len(events) > self._capacity:
            self.dropped = True
            self._buffer.clear()
        else:
            self._buffer.extend(events)
        self._ready.set()
        return not self.dropped

    async def next_batch(self) -> list[StoredEvent]:
        """Every event buffered since the last call, waiting for one if there is none.

        Raises:
            SubscriberDropped: The subscriber fell behind and was dropped.
        """
        while not self._buffer and not self.dropped:
            self._ready.clear()
            await self._ready.wait()
        if self.dropped:
            raise SubscriberDropped(f"a follower of thread {self.thread_id!r} fell behind")
        batch, self._buffer = self._buffer, []
        return batch


class Broker:
    """Live events per followed thread, fanned out to bounded subscriptions."""

    def __init__(self, *, capacity: int = DEFAULT_BUFFER) -> None:
        self._capacity = capacity
        self._subscriptions: dict[str, set[Subscription]] = {}
        self._newest: dict[str, int] = {}
        """The newest id published for each followed thread (and only those)."""

    @contextmanager
    def subscribe(self, thread_id: str, *, after: int = 0) -> Generator[Subscription]:
        """Follow `thread_id` for the duration of the `with` block, from a follower that has up to `after`."""
        subscription = self.open(thread_id, after=after)
        try:
            yield subscription
        finally:
            self.close(subscription)

    def open(self, thread_id: str, *, after: int = 0) -> Subscription:
        """Follow `thread_id` from now, from a follower that has up to `after`, until `close`.

        `subscribe` is the usual way; this one is for a follower that must be subscribed before it
        can start reading (see `web.following.follow_run`).
        """
        subscription = Subscription(thread_id, self._capacity, after)
        self._subscriptions.setdefault(thread_id, set()).add(subscription)
        return subscription

    def close(self, subscription: Subscription) -> None:
        """Stop following (a subscription `open` made); closing it again does nothing."""
        self._discard(subscription)

    def publish(self, thread_id: str, events: Sequence[StoredEvent]) -> None:
        """Hand `events` to every follower of `thread_id`, in id order; never blocks.

        A thread nobody follows costs nothing: its events are in the log already.
        """
        followers = self._subscriptions.get(thread_id)
        if not followers:
            return
        newest = self._newest.get(thread_id)
        if newest is not None:
            events = [stored for stored in events if stored.event_id > newest]
        if not events:
            return
        self._newest[thread_id] = events[-1].event_id
        for subscription in list(followers):
            if not subscription.offer(events):
                logger.info("dropped a slow follower of thread %s", thread_id)
                self._discard(subscription)

    def followers(self, thread_id: str) -> int:
        """How many subscriptions follow `thread_id` now."""
        return len(self._subscriptions.get(thread_id, ()))

    def followed(self) -> list[str]:
        """The threads someone follows now."""
        return list(self._subscriptions)

    def remembered(self) -> int:
        """How many threads the broker holds any state for (the followed ones; for tests and monitoring)."""
        return len(self._subscriptions.keys() | self._newest.keys())

    def newest(self, thread_id: str) -> int | None:
        """The newest id published for `thread_id` while followed, `None` when it is not followed."""
        return self._newest.get(thread_id)

    def position(self, thread_id: str) -> int | None:
        """After which id the log holds events the followers of `thread_id` may lack; `None` if none follow.

        Every follower has every event up to its own position, every event published since it
        subscribed is in its buffer, and every one published before is in the log it replays
        after subscribing: the greater of the lowest position and the newest published id is safe.
        """
        followers = self._subscriptions.get(thread_id)
        if not followers:
            return None
        lowest = min(subscription.position for subscription in followers)
        return max(lowest, self.newest(thread_id) or 0)

    def _discard(self, subscription: Subscription) -> None:
        followers = self._subscriptions.get(subscription.thread_id)
        if followers is None:
            return
        followers.discard(subscription)
        if not followers:
            del self._subscriptions[subscription.thread_id]
            self._newest.pop(subscription.thread_id, None)
