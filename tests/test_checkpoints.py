"""A run's checkpoint saved with its conversation, and the event log's fenced write, on SQLite and PostgreSQL.

Both run on statements compiled once, in one trip: what each guard refuses stores nothing at all.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict
from pydantic_ai.messages import ModelRequest
from sqlalchemy.ext.asyncio import AsyncConnection

from store import (
    Checkpoint,
    Database,
    LeaseLost,
    NewEvent,
    NewRecord,
    NewRun,
    NotFound,
    PendingCall,
    Run,
    Saving,
    StoreError,
    insert_pending,
)
from store.refusals import refused
from store.schema import RunRow, metadata, now_utc

from .store_workers import OpenWorker

pytestmark = pytest.mark.anyio

_runs = metadata.tables[RunRow.__tablename__]


async def _running(db: Database) -> tuple[Run, int]:
    """A run of a new thread, claimed by `db`'s worker, and the first of its event ids."""
    thread = await db.threads.create(user_id="alice", title="t")
    queued = (await db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="hello"))).run
    started = await db.runs.start_reserving(queued.run_id, events=8)
    assert started is not None
    run, _, first_id = started
    return run, first_id


def _conversation(run: Run) -> Conversation:
    return Conversation(conversation_id=run.thread_id, messages=[ModelRequest.user_text_prompt("hello")])


def _events(run: Run, first_id: int, count: int = 2) -> list[tuple[int, NewEvent]]:
    return [
        (first_id + n, NewEvent(run.run_id, "text_delta", json.dumps({"delta": str(n)}).encode()))
        for n in range(count)
    ]


async def _take_over(db: Database, heir: Database, run: Run) -> None:
    """Lapse `run`'s lease and let `heir` claim it: the worker of `db` no longer holds it."""
    async with db.engine.begin() as connection:
        await connection.execute(
            _runs.update()
            .where(_runs.c.run_id == run.run_id)
            .values(lease_expires_at=now_utc() - timedelta(seconds=1))
        )
    assert await heir.runs.start_reserving(run.run_id, events=8) is not None


async def _stored(db: Database, run: Run) -> tuple[object, ...]:
    """What a checkpoint of `run` could have stored: conversation, events, records, checkpoints, covered id."""
    loaded = await db.conversations.load(run.thread_id)
    return (
        None if loaded is None else len(loaded.messages),
        [event.event_id for event in await db.events.read(run.thread_id)],
        [record.tool_call_id for record in await db.records.list(run.thread_id)],
        (await db.runs.get(run.run_id)).checkpoints,
        (await db.threads.get(run.thread_id)).checkpoint_event_id,
    )


async def test_a_checkpoint_stores_everything_with_its_conversation(open_worker: OpenWorker) -> None:
    db = await open_worker("w1")
    run, first_id = await _running(db)
    records = [NewRecord("call-1", "order", {"id": "ORD-1", "note": "café"})]
    checkpoint = Checkpoint(
        run=run, event_id=first_id + 1, records=records, events=_events(run, first_id), trace_id="ab" * 16
    )
    await db.conversations.save_with(_conversation(run), checkpoint=checkpoint)
    assert await _stored(db, run) == (1, [first_id, first_id + 1], ["call-1"], 1, first_id + 1)
    [record] = await db.records.list(run.thread_id)
    assert (record.run_id, record.kind, record.data) == (run.run_id, "order", {"id": "ORD-1", "note": "café"})
    stored = await db.runs.get(run.run_id)
    assert (stored.status, stored.finished_at) == ("running", None)

    # The end: the run finishes, the thread idles; a record stored already is kept as it was.
    conversation = await db.conversations.load(run.thread_id)
    assert conversation is not None
    conversation.messages = [*conversation.messages, ModelRequest.user_text_prompt("more")]
    again = [NewRecord("call-1", "order", {"id": "changed"}), NewRecord("call-2", "order", {})]
    end = Checkpoint(run=run, event_id=first_id + 1, records=again, finish="failed", error="boom")
    await db.conversations.save_with(conversation, checkpoint=end)
    assert await _stored(db, run) == (2, [first_id, first_id + 1], ["call-1", "call-2"], 2, first_id + 1)
    ended = await db.runs.get(run.run_id)
    assert (ended.status, ended.error, ended.finished_at is not None) == ("failed", "boom", True)
    assert (await db.threads.get(run.thread_id)).status == "failed"
    assert (await db.records.list(run.thread_id))[0].data == {"id": "ORD-1", "note": "café"}
    async with db.engine.connect() as connection:
        trace_id = (
            await connection.execute(sa.select(_runs.c.trace_id).where(_runs.c.run_id == run.run_id))
        ).scalar_one()
    assert trace_id == "ab" * 16  # kept: the end's checkpoint gave none


async def test_a_checkpoint_of_a_run_taken_over_stores_nothing(open_worker: OpenWorker) -> None:
    db, heir = await open_worker("w1"), await open_worker("heir")
    run, first_id = await _running(db)
    await _take_over(db, heir, run)
    checkpoint = Checkpoint(
        run=run, event_id=first_id, records=[NewRecord("c", "k", {})], events=_events(run, first_id)
    )
    with pytest.raises(LeaseLost):
        await db.conversations.save_with(_conversation(run), checkpoint=checkpoint)
    assert await _stored(heir, run) == (None, [], [], 0, 0)
    # And the next checkpoint, a later save of the same conversation, is refused the same way.
    with pytest.raises(LeaseLost):
        await db.conversations.save_with(_conversation(run), checkpoint=checkpoint)
    assert await _stored(heir, run) == (None, [], [], 0, 0)


async def test_a_checkpoint_after_its_thread_was_deleted_stores_nothing(open_worker: OpenWorker) -> None:
    db = await open_worker("w1")
    run, first_id = await _running(db)
    await db.delete_thread(run.thread_id)
    checkpoint = Checkpoint(run=run, event_id=first_id, events=_events(run, first_id))
    with pytest.raises(NotFound, match="was deleted"):
        await db.conversations.save_with(_conversation(run), checkpoint=checkpoint)
    assert await db.conversations.load(run.thread_id) is None


async def test_a_conflicting_save_leaves_the_run_as_it_was(open_worker: OpenWorker) -> None:
    db = await open_worker("w1")
    run, first_id = await _running(db)
    await db.conversations.save(_conversation(run))
    stale = _conversation(run)  # never loaded: it would create the conversation stored meanwhile
    checkpoint = Checkpoint(run=run, event_id=first_id, events=_events(run, first_id), finish="completed")
    with pytest.raises(ConversationConflict):
        await db.conversations.save_with(stale, checkpoint=checkpoint)
    assert await _stored(db, run) == (1, [], [], 0, 0)
    assert (await db.runs.get(run.run_id)).status == "running"


@pytest.mark.parametrize("stale", ["carried", "carrying"])
async def test_a_save_carrying_another_stores_neither_when_either_conflicts(
    open_worker: OpenWorker, stale: str
) -> None:
    # A delegated run's checkpoint carrying its parent's (one unit of work on SQLite, one statement
    # on PostgreSQL): the conflict names the conversation that changed, and nothing of either is stored.
    db, other = await open_worker("w1"), await open_worker("other")
    run, first_id = await _running(db)
    parent = _conversation(run)
    sub = Conversation(
        conversation_id=f"{run.thread_id}/call-1", messages=[ModelRequest.user_text_prompt("go")]
    )
    for conversation in (parent, sub):
        await db.conversations.save(conversation)
    changed = await other.conversations.load(
        parent.conversation_id if stale == "carried" else sub.conversation_id
    )
    assert changed is not None
    changed.messages = [*changed.messages, ModelRequest.user_text_prompt("meanwhile")]
    await other.conversations.save(changed)  # `db` remembers the revision before
    revisions = (parent.revision, sub.revision)
    for conversation in (parent, sub):
        conversation.messages = [*conversation.messages, ModelRequest.user_text_prompt("more")]
    first = Saving(parent, Checkpoint(run=run, event_id=first_id + 1, trace_id="ab" * 16))
    checkpoint = Checkpoint(run=run, event_id=None, events=_events(run, first_id))
    with pytest.raises(ConversationConflict) as raised:
        await db.conversations.save_with(sub, checkpoint=checkpoint, first=first)
    assert raised.value.conversation_id == changed.conversation_id
    assert (parent.revision, sub.revision) == revisions
    # The thread's conversation as `other` left it, no event, the run not counted, the mark unmoved.
    assert await _stored(other, run) == (2 if stale == "carried" else 1, [], [], 0, 0)
    inner = await other.conversations.load(sub.conversation_id)
    assert inner is not None
    assert len(inner.messages) == (2 if stale == "carrying" else 1)


async def test_a_save_carrying_another_stores_both_in_one_checkpoint(open_worker: OpenWorker) -> None:
    db = await open_worker("w1")
    run, first_id = await _running(db)
    parent = _conversation(run)
    sub = Conversation(
        conversation_id=f"{run.thread_id}/call-1", messages=[ModelRequest.user_text_prompt("go")]
    )
    first = Saving(parent, Checkpoint(run=run, event_id=first_id + 1, trace_id="ab" * 16))
    checkpoint = Checkpoint(run=run, event_id=None, events=_events(run, first_id))
    await db.conversations.save_with(sub, checkpoint=checkpoint, first=first)
    stored = await _stored(db, run)
    # The thread marked as the parent's checkpoint says, the events of the sub-run's stored; one
    # checkpoint of the run, counted once, on both databases.
    assert stored == (1, [first_id, first_id + 1], [], 1, first_id + 1)
    inner = await db.conversations.load(sub.conversation_id)
    assert inner is not None
    assert len(inner.messages) == 1
    async with db.engine.connect() as connection:
        trace_id = (
            await connection.execute(sa.select(_runs.c.trace_id).where(_runs.c.run_id == run.run_id))
        ).scalar_one()
    assert trace_id == "ab" * 16


async def test_what_a_checkpoint_adds_commits_or_rolls_back_with_it(open_worker: OpenWorker) -> None:
    db, heir = await open_worker("w1"), await open_worker("heir")
    for taken_over in (True, False):
        run, first_id = await _running(db)
        if taken_over:
            await _take_over(db, heir, run)

        async def hold(connection: AsyncConnection, run: Run = run) -> None:
            await insert_pending(connection, run.thread_id, run.run_id, [PendingCall("call-9", "refund", {})])

        checkpoint = Checkpoint(
            run=run, event_id=first_id, events=_events(run, first_id), finish="awaiting_approval"
        )
        if taken_over:
            with pytest.raises(LeaseLost):
                await db.conversations.save_with(_conversation(run), checkpoint=checkpoint, also=hold)
            assert await db.approvals.list(thread_id=run.thread_id) == []
            assert await _stored(db, run) == (None, [], [], 0, 0)
        else:
            await db.conversations.save_with(_conversation(run), checkpoint=checkpoint, also=hold)
            assert [a.tool_call_id for a in await db.approvals.list(thread_id=run.thread_id)] == ["call-9"]
            assert await _stored(db, run) == (1, [first_id, first_id + 1], [], 1, first_id)
            assert (await db.threads.get(run.thread_id)).status == "awaiting_approval"


async def test_a_driver_error_in_a_checkpoint_is_the_stores(open_worker: OpenWorker) -> None:
    db = await open_worker("w1")
    run, first_id = await _running(db)
    await db.events.insert(run.thread_id, _events(run, first_id, 1))
    # An event id stored already: the database refuses the whole checkpoint, as a conflict.
    checkpoint = Checkpoint(run=run, event_id=first_id, events=_events(run, first_id))
    with pytest.raises(ConversationConflict):
        await db.conversations.save_with(_conversation(run), checkpoint=checkpoint)
    assert await _stored(db, run) == (None, [first_id], [], 0, 0)
    # The event log's own write translates it too.
    with pytest.raises(StoreError, match="appending events"):
        await db.events.insert(run.thread_id, _events(run, first_id), run_id=run.run_id, worker_id="w1")
    assert [e.event_id for e in await db.events.read(run.thread_id)] == [first_id]


async def test_the_event_log_stores_only_while_its_worker_holds_the_run(open_worker: OpenWorker) -> None:
    db, heir = await open_worker("w1"), await open_worker("heir")
    run, first_id = await _running(db)
    await db.events.insert(run.thread_id, _events(run, first_id, 1), run_id=run.run_id, worker_id="w1")
    with pytest.raises(NotFound):
        await db.events.insert(
            run.thread_id, _events(run, first_id + 1, 1), run_id="no-such-run", worker_id="w1"
        )
    await _take_over(db, heir, run)
    with pytest.raises(LeaseLost):
        await db.events.insert(run.thread_id, _events(run, first_id + 1), run_id=run.run_id, worker_id="w1")
    assert [e.event_id for e in await db.events.read(run.thread_id)] == [first_id]
    # Unfenced, it stores.
    await db.events.insert(run.thread_id, _events(run, first_id + 1, 1))
    assert [e.event_id for e in await db.events.read(run.thread_id)] == [first_id, first_id + 1]


class _Error(Exception):
    def __init__(self, sqlstate: str, text: str) -> None:
        super().__init__(text)
        self.sqlstate = sqlstate


def test_only_the_stores_own_refusals_are_read_as_refusals() -> None:
    ours = 'invalid input syntax for type integer: "durable-chat refused: lease lost"'
    assert refused(_Error("22P02", ours)) == "lease lost"
    assert refused(_Error("22P02", 'invalid input syntax for type integer: "abc"')) is None
    assert (
        refused(_Error("22P02", 'invalid input syntax for type integer: "durable-chat refused: else"'))
        is None
    )
    assert refused(_Error("23505", ours)) is None
    assert refused(ValueError(ours)) is None
    # A server whose messages are in another language quotes the value its own way.
    french = "syntaxe en entrée invalide pour le type integer : « durable-chat refused: no thread »"
    assert refused(_Error("22P02", french)) == "no thread"
    german = "ungültige Eingabesyntax für Typ integer: „durable-chat refused: active“"
    assert refused(_Error("22P02", german)) == "active"
    assert (
        refused(_Error("22P02", 'invalid input syntax for type integer: "durable-chat refused: keyedx"'))
        is None
    )


async def test_a_save_carrying_another_stores_neither_once_the_lease_is_lost(open_worker: OpenWorker) -> None:
    # The carried save's checkpoint, which only marks the thread, is one with the carrying one's:
    # that one's fence guards both, on both databases.
    db, heir = await open_worker("w1"), await open_worker("heir")
    run, first_id = await _running(db)
    await _take_over(db, heir, run)
    parent = _conversation(run)
    sub = Conversation(
        conversation_id=f"{run.thread_id}/call-1", messages=[ModelRequest.user_text_prompt("go")]
    )
    first = Saving(parent, Checkpoint(run=run, event_id=first_id + 1))
    with pytest.raises(LeaseLost):
        await db.conversations.save_with(sub, checkpoint=Checkpoint(run=run, event_id=None), first=first)
    assert await _stored(heir, run) == (None, [], [], 0, 0)
    assert await heir.conversations.load(sub.conversation_id) is None
