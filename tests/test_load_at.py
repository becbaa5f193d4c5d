"""A run's first load at the revision its queueing read (`Claimed.conversation`, `load_at`), on both databases.

Queueing a claimed run reads the thread's conversation revision in the same statement; the run then
loads at that revision with no statement when the store remembers it, and reads what it does not.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import pytest
from pydantic_ai.conversation import Conversation

from store import Claim, Database, NewRun, StoredRevision

from .messages import full_fidelity_conversation, full_fidelity_usage, realistic_turn
from .statements import sent_statements
from .store_workers import OpenWorker

pytestmark = pytest.mark.anyio


@pytest.fixture
async def db(open_worker: OpenWorker) -> Database:
    """A store-level worker on an empty database, SQLite or PostgreSQL; `open_worker` opens more on it."""
    return await open_worker("w1")


def _statements(db: Database) -> AbstractContextManager[list[str]]:
    """Every statement `db` sends inside the block, its first four words."""
    return sent_statements(db.engine, lambda sql: " ".join(sql.split()[:4]))


async def _queued_revision(db: Database, thread_id: str) -> StoredRevision | None:
    queued = await db.runs.queue(NewRun(thread_id=thread_id, kind="message", content="next"), Claim(events=8))
    assert queued.claimed is not None
    return queued.claimed.conversation


async def test_queueing_a_claimed_run_reads_the_conversations_revision(db: Database) -> None:
    fresh = await db.threads.create(user_id="alice", title="")
    assert await _queued_revision(db, fresh.thread_id) == StoredRevision(None)

    talked = await db.threads.create(user_id="alice", title="")
    conversation = Conversation(conversation_id=talked.thread_id, messages=realistic_turn(0))
    await db.conversations.save(conversation)
    assert conversation.revision is not None
    assert await _queued_revision(db, talked.thread_id) == StoredRevision(conversation.revision)


async def test_an_unclaimed_run_carries_no_revision(db: Database) -> None:
    thread = await db.threads.create(user_id="alice", title="")
    queued = await db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="later"))
    assert queued.claimed is None


async def test_loading_at_a_remembered_revision_sends_no_statement(db: Database) -> None:
    thread = await db.threads.create(user_id="alice", title="")
    saved = Conversation(
        conversation_id=thread.thread_id, messages=full_fidelity_conversation(), usage=full_fidelity_usage()
    )
    await db.conversations.save(saved)
    revision = await _queued_revision(db, thread.thread_id)
    assert revision is not None

    with _statements(db) as sent:
        loaded = await db.conversations.load_at(thread.thread_id, revision.revision)
    assert sent == []
    assert loaded is not None
    read = await db.conversations.load(thread.thread_id)
    assert read is not None
    assert (loaded.messages, loaded.usage, loaded.revision) == (read.messages, read.usage, read.revision)
    # What it hands out is the run's to change, as after a load: a save of it appends.
    loaded.messages = [*loaded.messages, *realistic_turn(1)]
    await db.conversations.save(loaded)
    again = await db.conversations.load(thread.thread_id)
    assert again is not None
    assert again.messages == [*read.messages, *realistic_turn(1)]


async def test_loading_at_no_revision_reads_nothing_and_neither_does_the_first_save(db: Database) -> None:
    thread = await db.threads.create(user_id="alice", title="")
    revision = await _queued_revision(db, thread.thread_id)
    assert revision == StoredRevision(None)

    with _statements(db) as sent:
        assert await db.conversations.load_at(thread.thread_id, None) is None
        await db.conversations.save(
            Conversation(conversation_id=thread.thread_id, messages=realistic_turn(0))
        )
    assert [statement for statement in sent if statement.upper().startswith("SELECT")] == []
    loaded = await db.conversations.load(thread.thread_id)
    assert loaded is not None
    assert loaded.messages == realistic_turn(0)


async def test_a_revision_this_store_does_not_remember_is_read(db: Database, open_worker: OpenWorker) -> None:
    thread = await db.threads.create(user_id="alice", title="")
    mine = Conversation(conversation_id=thread.thread_id, messages=realistic_turn(0))
    await db.conversations.save(mine)
    # Another worker saves a newer revision: this store remembers only the older one.
    other = await open_worker("w2")
    theirs = await other.conversations.load(thread.thread_id)
    assert theirs is not None
    theirs.messages = [*theirs.messages, *realistic_turn(1)]
    await other.conversations.save(theirs)
    assert theirs.revision not in (None, mine.revision)

    with _statements(db) as sent:
        loaded = await db.conversations.load_at(thread.thread_id, theirs.revision)
    assert sent != []
    assert loaded is not None
    assert (loaded.messages, loaded.revision) == ([*realistic_turn(0), *realistic_turn(1)], theirs.revision)
