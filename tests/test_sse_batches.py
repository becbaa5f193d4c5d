"""The event stream writes each batch (a replay page, a broker batch) as one chunk of frames."""

from __future__ import annotations

import anyio
import pytest

from store import Database
from stream import StoredEvent, TextDelta, encode_events
from web.following import event_frames
from worker import Broker

from .test_notify import store_events

pytestmark = pytest.mark.anyio


def deltas(*ids: int) -> list[StoredEvent]:
    return [StoredEvent(i, TextDelta(run_id="r1", part_id="p", delta=f"d{i}")) for i in ids]


async def test_a_replay_page_and_a_broker_batch_are_one_write_each(database_url: str) -> None:
    async with await Database.connect(database_url) as db:
        thread = await db.threads.create(user_id="u")
        await store_events(db, thread.thread_id, "one", "two", "three")
        broker = Broker()
        frames = event_frames(db, broker, thread.thread_id, after=0, poll_seconds=3600)
        with anyio.fail_after(30):
            replayed = await anext(frames)
            assert replayed.count(b"\n\n") == 3  # the three stored events, in one chunk
            assert replayed.startswith(b"id: 1\n")
            assert b"id: 3\n" in replayed
            # Live: two events published together reach the client in one chunk; an id it has is left out.
            broker.publish(thread.thread_id, deltas(3, 4, 5))
            assert await anext(frames) == encode_events(deltas(4, 5))
        await frames.aclose()
