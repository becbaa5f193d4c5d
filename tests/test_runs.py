"""`web.runs`: the events of a paused turn, which the protocol endpoints read after a decision to rebuild
a nested approval's chain, are read from the end of the log back to the turn's start, never the whole
thread. On SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from agent import decide, open_runtime, run_step, stored_events
from agent.eventlog import new_event
from store import NewRun
from stream import RunStarted, StreamEvent, TextDelta
from web.runs import turn_events

from .agent_chains import Chain
from .statements import sent_statements

pytestmark = pytest.mark.anyio

EARLIER = 5000
"""Events of an earlier turn: far more than one read of the log takes at once."""


async def test_the_paused_turns_events_are_read_without_the_threads_earlier_ones(database_url: str) -> None:
    async with open_runtime(Chain(2, approval=True).app(), database_url) as runtime:
        db = runtime.db
        thread_id = (await db.threads.create(user_id="alice", title="t")).thread_id
        earlier: list[StreamEvent] = [
            RunStarted(run_id="earlier", kind="message"),
            *(TextDelta(run_id="earlier", part_id="e.1.0", delta="x") for _ in range(EARLIER - 1)),
        ]
        first = await db.events.reserve(thread_id, EARLIER)
        await db.events.insert(thread_id, [(first + i, new_event(e)) for i, e in enumerate(earlier)])
        run = (await db.runs.queue(NewRun(thread_id=thread_id, kind="message", content="Book"))).run
        assert await run_step(runtime, run.run_id) == "awaiting_approval"
        thread = await db.threads.get(thread_id)  # as the endpoints read it, before the decision
        [pending] = await db.approvals.list(thread_id=thread_id, status="pending")
        decision = await decide(db, thread_id, pending.tool_call_id, decision="approved", decided_by="alice")
        assert decision.resume_run_id is not None
        with sent_statements(db.engine) as sent:
            turn = await turn_events(db, thread, before=decision.resume_run_id)
        whole = [
            s.event for s in stored_events(await db.events.read(thread_id)) if s.event.run_id == run.run_id
        ]

    assert turn == whole
    assert isinstance(turn[0], RunStarted)
    assert (turn[0].run_id, turn[0].kind) == (run.run_id, "message")
    # The chain the resumed agents run in: each delegated call, made in the call above it.
    made_in = [
        (e.parent_tool_call_id, getattr(e, "tool_call_id", None)) for e in turn if e.type == "tool_call"
    ]
    assert made_in == [(None, "travel_0_0"), ("travel_0_0", "booking_0_0"), ("booking_0_0", "payments_0_0")]
    # What is newer than the thread as read, then one window of ids back: reading the whole log
    # from its start would take one statement per page of it.
    reads = [sql for sql in sent if "events" in sql.lower()]
    assert len(reads) == 2, reads
