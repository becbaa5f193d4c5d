"""`web.following.follow_run` on a run the request just queued: subscribed at once, nothing read, nothing missed.

The protocol endpoints (AI SDK, AG-UI) queue a run, then stream it. When the queueing claimed the
run here, the stream is subscribed when `follow_run` is called, before the run can publish; it
reads no log. These tests let the whole run happen before the stream is first read: a subscription
made any later (on the first read, say) would miss every event, and the stream would wait for its
idle poll (an hour here) instead of ending.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path

import anyio
import pytest

from agent import Opened
from stream import RunFinished, StreamEvent, TextDelta
from web.following import follow_run
from web.services import Services

from .scripted import Calls, Script
from .served import finished, served
from .statements import sent_statements

pytestmark = pytest.mark.anyio

LOOKUP = Calls([("lookup", {"key": "balance"})])


@pytest.fixture
async def opened(database_url: str, tmp_path: Path) -> AsyncIterator[Services]:
    script = Script([LOOKUP, "The balance is 10."])
    async with served(
        database_url, tmp_path, script, sse_poll_seconds=3600, sse_notified_poll_seconds=3600
    ) as s:
        yield s


async def queue(s: Services) -> Opened:
    thread = await s.db.threads.create(user_id="alice")
    queued = await s.runner.queue(thread.thread_id, "message", content="What is my balance?")
    assert queued.claimed is not None, "claimed at queueing, as the endpoints' runs are"
    return queued


async def followed(s: Services) -> tuple[str, AsyncGenerator[list[StreamEvent]]]:
    """A run queued here and its answer's events, not read yet: its thread, and the events."""
    queued = await queue(s)
    run_id, thread_id = queued.run.run_id, queued.run.thread_id
    events = follow_run(s, thread_id, start_run_id=run_id, until_run_id=run_id, opened=queued)
    assert s.broker.followers(thread_id) == 1  # subscribed already
    return thread_id, events


async def test_a_run_queued_here_streams_whole_from_the_subscription_with_no_read(opened: Services) -> None:
    s = opened
    thread_id, events = await followed(s)
    await finished(s, thread_id)  # the whole run, stored and published, before the stream is read
    got: list[StreamEvent] = []
    with sent_statements(s.db.engine) as sent, anyio.fail_after(30):
        async for batch in events:
            got += batch
    assert sent == []
    kinds = [event.type for event in got]
    assert [kind for i, kind in enumerate(kinds) if i == 0 or kinds[i - 1] != kind] == [
        "run_started",
        "user_message",
        "tool_call",
        "tool_result",
        "text_delta",
        "text_done",
        "run_finished",
    ]
    assert "".join(event.delta for event in got if isinstance(event, TextDelta)) == "The balance is 10."
    assert isinstance(got[-1], RunFinished)
    assert got[-1].status == "completed"
    assert s.broker.followers(thread_id) == 0


async def test_a_stream_never_read_leaves_no_subscription(opened: Services) -> None:
    s = opened
    thread_id, events = await followed(s)
    del events  # a response that never started (the client went away first)
    gc.collect()
    assert s.broker.followers(thread_id) == 0
    await finished(s, thread_id)


async def test_a_run_queued_before_reads_where_it_starts(opened: Services) -> None:
    # Without the queueing in hand (a reconnecting client), the run's start is read from the log.
    s = opened
    queued = await queue(s)
    run_id, thread_id = queued.run.run_id, queued.run.thread_id
    await finished(s, thread_id)
    events = follow_run(s, thread_id, start_run_id=run_id, until_run_id=run_id)
    assert s.broker.followers(thread_id) == 0
    got: list[StreamEvent] = []
    with sent_statements(s.db.engine, lambda sql: sql.split()[0]) as sent, anyio.fail_after(30):
        async for batch in events:
            got += batch
    assert sent == ["SELECT", "SELECT"]  # where the run starts, then its events
    assert got[0].type == "run_started"
    assert got[-1].type == "run_finished"
