"""A run queued and claimed at once has its first events stored by the queueing, in its own trace.

`run_started` and `user_message` go into the queueing's transaction (`store.Runs.queue(opening=)`)
with the first ids the run reserves, stamped with the trace id of the run's span (started before
the queueing: `agent.start_run_span`); the run goes on from the next id, and its event writer
waits its interval after that transaction as after any other. A run not claimed at queueing
(the worker at its limit) stores them itself when it starts, as before.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from store import run_trace_id
from stream import RunFinished
from web import Settings, create_app
from web.broker import Subscription
from web.services import Services

from .core_app import core_app
from .scripted import Calls, Script
from .statements import sent_statements
from .test_follow_run import finished, opened  # noqa: F401  (`opened` is a fixture)

pytestmark = pytest.mark.anyio

LOOKUP = Calls([("lookup", {"key": "balance"})])


async def test_the_queueing_stores_the_opening_events_in_the_runs_trace(opened: Services) -> None:  # noqa: F811
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
    settings = Settings(database_url=database_url, secret="opening-secret", data_dir=tmp_path, max_runs=1)
    app = create_app(settings, app=core_app(Script([LOOKUP, "The balance is 10."], then="Again.")))
    async with app.router.lifespan_context(app):
        yield app.state.services


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


async def until_finished(subscription: Subscription) -> None:
    with anyio.fail_after(30):
        while not any(isinstance(stored.event, RunFinished) for stored in await subscription.next_batch()):
            pass
