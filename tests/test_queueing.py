"""Queueing a run in one trip, on SQLite and PostgreSQL: what it writes, and that a refusal writes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from datetime import timedelta

import pytest
import sqlalchemy as sa

from store import (
    ApprovalPending,
    Claim,
    Database,
    NewRun,
    NotFound,
    PendingCall,
    Queued,
    RunActive,
    Worker,
    insert_pending,
)
from store.schema import ThreadRow, metadata

from .conftest import MigratedDatabases

pytestmark = pytest.mark.anyio

_threads = metadata.tables[ThreadRow.__tablename__]


@pytest.fixture(params=[pytest.param("sqlite"), pytest.param("postgresql", marks=pytest.mark.postgres)])
async def db(
    request: pytest.FixtureRequest, migrated_databases: MigratedDatabases
) -> AsyncIterator[Database]:
    url = await migrated_databases.empty(request.param)
    opened = await Database.connect(url, worker=Worker(worker_id="w1", lease=timedelta(seconds=30)))
    try:
        yield opened
    finally:
        await opened.aclose()


async def _thread_row(db: Database, thread_id: str) -> tuple[object, ...]:
    async with db.engine.connect() as connection:
        row = (
            await connection.execute(
                sa.select(
                    _threads.c.title, _threads.c.status, _threads.c.updated_at, _threads.c.last_event_id
                ).where(_threads.c.thread_id == thread_id)
            )
        ).one()
    return tuple(row)


async def test_a_claimed_run_is_started_with_its_ids_and_its_users_count(db: Database) -> None:
    thread = await db.threads.create(user_id="alice", title="")
    other = await db.threads.create(user_id="alice", title="")
    await db.runs.queue(NewRun(thread_id=other.thread_id, kind="message", content="earlier"))
    queued = await db.runs.queue(
        NewRun(thread_id=thread.thread_id, kind="message", content="Where is  ORD-5678?"),
        Claim(events=8, count_window=timedelta(hours=1)),
    )
    assert queued.created
    assert queued.claimed is not None
    run = queued.run
    assert (run.status, run.attempt, run.checkpoints, run.lease_owner, run.kind) == (
        "running",
        1,
        0,
        "w1",
        "message",
    )
    assert run.started_at == run.created_at
    assert run.lease_expires_at is not None
    assert run.lease_expires_at > run.created_at
    assert (queued.claimed.user_id, queued.claimed.first_event_id) == ("alice", 1)
    assert queued.claimed.messages_sent == (timedelta(hours=1), 2)
    title, status, _, last_event_id = await _thread_row(db, thread.thread_id)
    assert (title, status, last_event_id) == ("Where is ORD-5678?", "running", 8)
    assert await db.runs.get(run.run_id) == run


async def test_an_unclaimed_run_is_queued_free(db: Database) -> None:
    thread = await db.threads.create(user_id="alice", title="kept")
    queued = await db.runs.queue(NewRun(thread_id=thread.thread_id, kind="regenerate", content="again"))
    run, created = queued.run, queued.created
    assert created
    assert (run.status, run.attempt, run.lease_owner, run.lease_expires_at, run.started_at) == (
        "queued",
        0,
        None,
        None,
        None,
    )
    title, status, _, last_event_id = await _thread_row(db, thread.thread_id)
    assert (title, status, last_event_id) == ("kept", "running", 0)


async def test_a_refused_run_leaves_the_thread_as_it_was(db: Database) -> None:
    with pytest.raises(NotFound):
        await db.runs.queue(
            NewRun(thread_id="no-such-thread", kind="message", content="hello"), Claim(events=8)
        )

    thread = await db.threads.create(user_id="alice", title="")
    first = await db.runs.queue(
        NewRun(thread_id=thread.thread_id, kind="message", content="first", idempotency_key="k1"),
        Claim(events=8),
    )
    before = await _thread_row(db, thread.thread_id)
    with pytest.raises(RunActive):
        await db.runs.queue(
            NewRun(thread_id=thread.thread_id, kind="message", content="second"), Claim(events=8)
        )
    # The same key again: the run it queued, as it is now.
    again = await db.runs.queue(
        NewRun(thread_id=thread.thread_id, kind="message", content="first", idempotency_key="k1"),
        Claim(events=8),
    )
    assert (again.created, again.claimed, again.run) == (False, None, await db.runs.get(first.run.run_id))
    assert await _thread_row(db, thread.thread_id) == before

    await db.runs.finish(first.run.run_id, "awaiting_approval")
    async with db.engine.begin() as connection:
        await insert_pending(
            connection, thread.thread_id, first.run.run_id, [PendingCall("c1", "refund", {})]
        )
    before = await _thread_row(db, thread.thread_id)
    with pytest.raises(ApprovalPending):
        await db.runs.queue(
            NewRun(thread_id=thread.thread_id, kind="message", content="third"), Claim(events=8)
        )
    assert await _thread_row(db, thread.thread_id) == before


async def test_a_run_queued_for_a_user_finds_only_that_users_thread(db: Database) -> None:
    thread = await db.threads.create(user_id="alice", title="")
    before = await _thread_row(db, thread.thread_id)
    for claim in (8, None):
        with pytest.raises(NotFound):
            await db.runs.queue(
                NewRun(thread_id=thread.thread_id, kind="message", content="mine now", user_id="bob"),
                None if claim is None else Claim(events=claim),
            )
    assert await _thread_row(db, thread.thread_id) == before
    async with db.engine.connect() as connection:
        runs = (await connection.execute(sa.text("SELECT count(*) FROM runs"))).scalar_one()
    assert runs == 0
    queued = await db.runs.queue(
        NewRun(thread_id=thread.thread_id, kind="message", content="mine", user_id="alice"), Claim(events=8)
    )
    assert queued.claimed is not None
    assert (queued.run.content, queued.claimed.user_id) == ("mine", "alice")


async def test_of_concurrent_requests_with_one_key_one_queues_the_run(db: Database) -> None:
    thread = await db.threads.create(user_id="alice", title="")
    outcomes = await asyncio.gather(
        *(
            db.runs.queue(
                NewRun(thread_id=thread.thread_id, kind="message", content="hi", idempotency_key="same")
            )
            for _ in range(6)
        ),
        return_exceptions=True,
    )
    created = [o for o in outcomes if isinstance(o, Queued) and o.created]
    assert len(created) == 1
    run = created[0].run
    for outcome in outcomes:
        assert isinstance(outcome, RunActive) or (
            isinstance(outcome, Queued) and outcome.run.run_id == run.run_id
        )
    assert [r.run_id for r in await db.runs.of_thread(thread.thread_id)] == [run.run_id]


async def test_a_run_queued_on_a_missing_thread_can_make_it(db: Database) -> None:
    queued = await db.runs.queue(
        NewRun(
            thread_id="chat-1", kind="message", content="Hello  there", user_id="alice", create_unless="c1"
        ),
        Claim(events=8),
    )
    assert queued.claimed is not None
    assert (queued.claimed.user_id, queued.claimed.first_event_id) == ("alice", 1)
    thread = await db.threads.get("chat-1", user_id="alice")
    assert (thread.title, thread.status, thread.last_event_id) == ("Hello there", "running", 8)
    assert thread.created_at == thread.updated_at == queued.run.created_at
    # Made already: marked as any thread is, its title kept.
    await db.runs.finish(queued.run.run_id, "completed")
    again = await db.runs.queue(
        NewRun(thread_id="chat-1", kind="message", content="Later", user_id="alice", create_unless="c1"),
        Claim(events=8),
    )
    assert again.claimed is not None
    assert again.claimed.first_event_id == 9
    assert (await db.threads.get("chat-1")).title == "Hello there"


async def test_a_thread_is_not_made_for_a_chat_naming_a_thread_of_the_users_own(db: Database) -> None:
    own = await db.threads.create(user_id="alice", title="mine")
    theirs = await db.threads.create(user_id="bob", title="bob's", thread_id="chat-2")
    for thread_id, user_id, unless in (("chat-1", "alice", own.thread_id), ("chat-2", "alice", "c2")):
        with pytest.raises(NotFound):
            await db.runs.queue(
                NewRun(
                    thread_id=thread_id, kind="message", content="hi", user_id=user_id, create_unless=unless
                ),
                Claim(events=8),
            )
    with pytest.raises(NotFound):
        await db.threads.get("chat-1")
    assert await db.threads.get("chat-2") == theirs  # another user's thread of that id: untouched
    async with db.engine.connect() as connection:
        runs = (await connection.execute(sa.text("SELECT count(*) FROM runs"))).scalar_one()
    assert runs == 0
    # Bob's chat named by Alice's thread id is only a chat id: Bob's thread is made.
    queued = await db.runs.queue(
        NewRun(thread_id="chat-3", kind="message", content="hi", user_id="bob", create_unless=own.thread_id),
        Claim(events=8),
    )
    assert (await db.threads.get("chat-3", user_id="bob")).thread_id == queued.run.thread_id


async def test_of_concurrent_first_messages_of_a_chat_one_makes_its_thread_and_queues(db: Database) -> None:
    def first(thread_id: str, key: str | None) -> Awaitable[Queued]:
        # The chat's own id (`create_unless`) is another than its thread's, as a derived thread's is.
        return db.runs.queue(
            NewRun(
                thread_id=thread_id,
                kind="message",
                content="hi",
                idempotency_key=key,
                user_id="alice",
                create_unless=f"id of {thread_id}",
            ),
            Claim(events=8),
        )

    # The same first message sent four times at once (one key): one thread, one run, each answer that run.
    same = await asyncio.gather(*(first("chat-1", "m1") for _ in range(4)), return_exceptions=True)
    queued = [outcome for outcome in same if isinstance(outcome, Queued)]
    assert len({outcome.run.run_id for outcome in queued}) == 1
    assert [outcome.created for outcome in queued].count(True) == 1
    assert all(isinstance(outcome, (Queued, RunActive)) for outcome in same)
    # Four different first messages at once: one queues, the others find its run active.
    fresh = await asyncio.gather(*(first("chat-2", None) for _ in range(4)), return_exceptions=True)
    assert sum(isinstance(outcome, Queued) for outcome in fresh) == 1
    assert sum(isinstance(outcome, RunActive) for outcome in fresh) == 3
    assert (await db.threads.get("chat-2", user_id="alice")).status == "running"
