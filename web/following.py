"""Following a thread's events: every stored one after a point, then the live ones, a batch at a time.

The native SSE endpoint (`web.sse`) and the protocol endpoints (`web.ai_sdk`, `web.ag_ui`) all
follow a thread through `thread_batches`. How:

1. Subscribe to the broker *first*, so nothing published during the replay is missed.
2. Replay from the log every event after the client's id.
3. Relay live events (published since the subscription; every event is stored before it is
   published, so the replay has the earlier ones), skipping any id not above the last one sent. Ids increase per thread but can
   skip (a run leaves unused ids of the block it reserved). A subscription dropped as too slow
   falls back to reading the log, then subscribes again.
4. Events another process stores (several servers on one PostgreSQL) reach the broker through
   `worker.relay` when that process notifies; the follower keeps its subscription's `position`
   current so the relay knows what it has. When idle for the poll interval the stream reads the
   log itself too: the only way on SQLite shared by several processes, a safety net on
   PostgreSQL. A thread deleted meanwhile ends the stream.
5. A database that becomes unreachable ends the stream (the client reconnects with its
   `Last-Event-ID`) rather than failing it half-way.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import aclosing

from starlette.requests import Request
from starlette.responses import Response

from agent import Opened, stored_events
from store import Database, DatabaseUnavailable, NotFound
from stream import RunFinished, StoredEvent, StreamEvent, encode_events
from worker import Broker, SubscriberDropped, Subscription

from .errors import ApiError
from .services import Services
from .sse_response import CountedEventStream

__all__ = ("after_id", "event_frames", "follow_run", "idle_poll_seconds", "stream_response", "thread_batches")

logger = logging.getLogger(__name__)

_REPLAY_PAGE = 500


def idle_poll_seconds(s: Services) -> float:
    """How long a follower waits idle before it reads the log itself."""
    # With notifications relayed, reading the log when idle is only a safety net.
    return s.settings.sse_poll_seconds if s.relay is None else s.settings.sse_notified_poll_seconds


def stream_response(
    s: Services, frames: AsyncIterator[bytes], *, user_id: str, headers: Mapping[str, str] | None = None
) -> Response:
    """An SSE response of `frames`, with the keep-alive; the client's disconnect ends only the response.

    It holds one of `user_id`'s stream slots while it lasts (`web.limits`): one stream more than
    allowed is `429 too_many_streams`.

    Raises:
        ApiError: 429 `too_many_streams`.
    """
    return CountedEventStream(
        frames,
        release=s.streams.acquire(user_id),
        ping=s.settings.sse_ping_seconds,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})},
    )


async def event_frames(
    db: Database, broker: Broker, thread_id: str, *, after: int, poll_seconds: float
) -> AsyncIterator[bytes]:
    """The SSE frames of every event of `thread_id` after `after`, then of live ones, until the end.

    Each item is the frames of one batch (`stream.encode_events`), to be written at once. The stream ends when the thread is
    deleted or the database cannot be reached.
    """
    async with aclosing(
        thread_batches(db, broker, thread_id, after=after, poll_seconds=poll_seconds)
    ) as batches:
        async for batch in batches:
            yield encode_events(batch)


async def thread_batches(
    db: Database,
    broker: Broker,
    thread_id: str,
    *,
    after: int,
    poll_seconds: float,
    subscribed: Subscription | None = None,
) -> AsyncGenerator[list[StoredEvent]]:
    """Every event of `thread_id` after `after`, then the live ones, a batch at a time as `event_frames` sends them.

    The other protocols (`web.ai_sdk`, `web.ag_ui`) follow a thread through this too. Closing it
    closes what it reads from at once (its broker subscription included), not when the garbage
    collector finds the generators: that would cost the loop a task and a self-pipe wake-up each.

    `subscribed`: a subscription of the thread made (`Broker.open`) when nothing after `after` was
    stored yet, so every such event reaches it: the log is not read until it is dropped (it is
    closed with the iteration).
    """
    events = _events(db, broker, thread_id, after=after, poll_seconds=poll_seconds, subscribed=subscribed)
    async with aclosing(events):
        try:
            async for batch in events:
                yield batch
        except DatabaseUnavailable as error:
            logger.warning("ended an event stream of thread %s: %s", thread_id, error)


async def _events(
    db: Database,
    broker: Broker,
    thread_id: str,
    *,
    after: int,
    poll_seconds: float,
    subscribed: Subscription | None,
) -> AsyncGenerator[list[StoredEvent]]:
    last = after
    while True:
        subscription = subscribed if subscribed is not None else broker.open(thread_id, after=last)
        try:
            if subscribed is None:
                async with aclosing(_replay(db, thread_id, after=last)) as pages:
                    async for page in pages:
                        last = subscription.position = page[-1].event_id
                        yield page
            subscribed = None  # once dropped or idle, it reads the log like any follower
            while True:
                try:
                    # A timeout, not `wait_for`: no task made for each batch.
                    async with asyncio.timeout(poll_seconds):
                        batch = await subscription.next_batch()
                except SubscriberDropped:
                    break  # read the log, then follow again
                except TimeoutError:
                    if not await _exists(db, thread_id):
                        return  # deleted: nothing more will come
                    break
                # Ids increase but may skip (ids a run reserved and left unused): any id above
                # the last one sent is next. Lower ones came in the replay.
                fresh = [stored for stored in batch if stored.event_id > last]
                if fresh:
                    last = subscription.position = fresh[-1].event_id
                    yield fresh
        finally:
            broker.close(subscription)


async def _replay(db: Database, thread_id: str, *, after: int) -> AsyncGenerator[list[StoredEvent]]:
    while True:
        logged = await db.events.read(thread_id, after=after, limit=_REPLAY_PAGE)
        page = stored_events(logged)
        if page:
            after = page[-1].event_id
            yield page
        if len(logged) < _REPLAY_PAGE:
            return


async def _exists(db: Database, thread_id: str) -> bool:
    try:
        await db.threads.get(thread_id)
    except NotFound:
        return False
    return True


def follow_run(
    s: Services, thread_id: str, *, start_run_id: str, until_run_id: str, opened: Opened | None = None
) -> AsyncGenerator[list[StreamEvent]]:
    """The thread's events from the start of `start_run_id` until `until_run_id` finished (or the thread is gone).

    Live ones as they happen, after a replay of the stored ones: what a client that reconnects
    needs, from any point of the run's life. A batch at a time (what the broker handed over, or a
    replay page), to be written at once. Ending the iteration (a client that went away) stops
    nothing but the reading.

    `opened`: the run `start_run_id` as this request just queued it. When the queueing also
    claimed it here, nothing is read: the events the queueing stored with the run come first, from
    hand (`Opened.events`), and the thread is subscribed to now, before the run (a task not
    started: the request has not let the event loop run since it queued) can store and publish any
    other, so every later one comes through the subscription. The subscription ends with the
    iteration, or with the iterator if it is never started.
    """
    if opened is None or not opened.created or opened.claimed is None:
        return _follow(s, thread_id, until_run_id, start_run_id=start_run_id)
    opening = opened.events
    after = opening[-1].event_id if opening else opened.claimed.first_event_id - 1
    subscription = s.broker.open(thread_id, after=after)
    events = _follow(s, thread_id, until_run_id, after=after, subscribed=subscription, opening=opening)
    weakref.finalize(events, s.broker.close, subscription)
    return events


async def _follow(
    s: Services,
    thread_id: str,
    until_run_id: str,
    *,
    start_run_id: str | None = None,
    after: int | None = None,
    subscribed: Subscription | None = None,
    opening: Sequence[StoredEvent] = (),
) -> AsyncGenerator[list[StreamEvent]]:
    try:
        if opening:
            yield [stored.event for stored in opening]
        if after is None:
            assert start_run_id is not None
            after = await s.db.events.before_run(thread_id, start_run_id)
        batches = thread_batches(
            s.db, s.broker, thread_id, after=after, poll_seconds=idle_poll_seconds(s), subscribed=subscribed
        )
        async with aclosing(batches):
            async for batch in batches:
                events: list[StreamEvent] = []
                for stored in batch:
                    events.append(stored.event)
                    if isinstance(stored.event, RunFinished) and stored.event.run_id == until_run_id:
                        yield events
                        return
                yield events
    finally:
        if subscribed is not None:  # closed however the iteration ends (closing twice does nothing)
            s.broker.close(subscribed)


def after_id(request: Request) -> int:
    """Where a follower is: `Last-Event-ID` or `?after=` (422 for anything but a non-negative integer)."""
    text = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    text = text.strip()
    # ASCII only: `isdigit` also takes digits such as "²" that `int` refuses.
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise ApiError(
            422,
            "validation_error",
            f"Last-Event-ID / after must be a non-negative integer, not {text[:40]!r}",
        )
    return int(text)
