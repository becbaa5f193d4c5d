"""A run queued and claimed at once has its first events stored by the queueing, in its own trace.

`run_started` and `user_message` go into the queueing's transaction (`store.Claim.opening`)
with the first ids the run reserves, stamped with the trace id of the run's span (started before
the queueing: `agent.queue_run`); the run goes on from the next id, and its event writer
waits its interval after that transaction as after any other. A run not claimed at queueing
(the worker at its limit) stores them itself when it starts, as before.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent import queue_run, run_step
from store import run_trace_id
from stream import CollectingSink
from web.services import Services

from .core_app import CoreFactory
from .scripted import Calls, Script
from .served import finished, served, until_finished
from .statements import sent_statements

pytestmark = pytest.mark.anyio

LOOKUP = Calls([("lookup", {"key": "balance"})])


@pytest.fixture
async def opened(database_url: str, tmp_path: Path) -> AsyncIterator[Services]:
    async with served(database_url, tmp_path, Script([LOOKUP, "The balance is 10."])) as s:
        yield s


async def test_the_queueing_stores_the_opening_events_in_the_runs_trace(opened: Services) -> None:
    s = opened
    thread = await s.db.threads.create(user_id="alice")
    with sent_statements(s.db.engine) as sent:
        queued = await s.runner.queue(thread.thread_id, "message", content="What is my balance?")
    # SQLite: the run's insert and the events' in one transaction; PostgreSQL: one statement.
    assert any("INSERT INTO events" in sql for sql in sent)
    assert queued.claimed is not None
    first = queued.claimed.first_event_id
    await finished(s, thread.thread_id)
    logged = await s.db.events.read(thread.thread_id, after=0, limit=100)
    assert [(e.event_id, e.type) for e in logged[:2]] == [(first, "run_started"), (first + 1, "user_message")]
    ids = [e.event_id for e in logged]
    assert ids == sorted(set(ids))  # none twice: the run went on from the next id
    assert (await s.db.runs.get(queued.run.run_id)).status == "completed"
    trace_id = await run_trace_id(s.db.engine, queued.run.run_id)
    assert trace_id is not None
    assert {json.loads(e.data).get("trace_id") for e in logged} == {trace_id}


@pytest.fixture
async def at_its_limit(database_url: str, tmp_path: Path) -> AsyncIterator[Services]:
    async with served(
        database_url, tmp_path, Script([LOOKUP, "The balance is 10."], then="Again."), max_runs=1
    ) as s:
        yield s


async def test_a_run_not_claimed_at_queueing_stores_them_when_it_starts(at_its_limit: Services) -> None:
    s = at_its_limit
    one = await s.db.threads.create(user_id="alice")
    two = await s.db.threads.create(user_id="alice")
    with s.broker.subscribe(one.thread_id) as ones, s.broker.subscribe(two.thread_id) as twos:
        first = await s.runner.queue(one.thread_id, "message", content="What is my balance?")
        second = await s.runner.queue(two.thread_id, "message", content="And now?")
        assert first.claimed is not None
        assert second.claimed is None  # the worker drives one run at once: this one waits, queued
        await until_finished(ones)
        s.runner.submit(second.run.run_id)  # a slot is free (the runner's sweep would take it too)
        await until_finished(twos)
    logged = await s.db.events.read(two.thread_id, after=0, limit=100)
    assert [e.type for e in logged[:2]] == ["run_started", "user_message"]
    assert logged[-1].type == "run_finished"


async def test_a_callers_sink_sees_the_opening_events_the_queueing_stored(core_factory: CoreFactory) -> None:
    # `run_step(sink=)` sees every event of the run, the two stored before it started included.
    app = await core_factory(Script([LOOKUP, "The balance is 10."]))
    thread = await app.thread()
    opened = await queue_run(
        app.runtime, thread.thread_id, "message", content="What is my balance?", claim=True
    )
    assert opened.claimed is not None
    assert [stored.event.type for stored in opened.events] == ["run_started", "user_message"]
    sink = CollectingSink()
    run_id = opened.run.run_id
    assert (
        await run_step(app.runtime, run_id, sink=sink, claimed=opened.claimed, span=opened.span)
        == "completed"
    )
    assert [event.type for event in sink.events[:3]] == ["run_started", "user_message", "tool_call"]
    logged = [event.type for event in await app.log(thread)]
    assert logged.count("run_started") == 1  # stored once, by the queueing
    assert logged.count("user_message") == 1
    assert logged[-1] == "run_finished"


async def test_a_run_queued_without_a_claim_or_again_by_its_key_opens_nothing(
    core_factory: CoreFactory,
) -> None:
    app = await core_factory(Script([LOOKUP, "The balance is 10."]))
    thread = await app.thread()
    free = await queue_run(
        app.runtime, thread.thread_id, "message", content="Hi", claim=False, idempotency_key="k"
    )
    assert (free.created, free.claimed, free.events, free.span) == (True, None, (), None)
    assert free.run.status == "queued"
    again = await queue_run(
        app.runtime, thread.thread_id, "message", content="Hi", claim=True, idempotency_key="k"
    )
    # The key names the run queued first: returned as it is, neither claimed nor opened again.
    assert (again.created, again.claimed, again.events, again.span) == (False, None, (), None)
    assert again.run.run_id == free.run.run_id
    assert await app.log(thread) == []  # its opening events come when it is driven
