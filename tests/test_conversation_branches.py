"""The conformance suite, continued: branch, fork, listing and delete, on every backend.

Like `test_conversations.py`, each test runs on pydantic-ai's `InMemoryConversationStore` (the
reference) and on our `SqlConversationStore` over SQLite and PostgreSQL.
"""

from __future__ import annotations

import dataclasses

import pytest
from dirty_equals import IsDatetime, IsStr
from inline_snapshot import snapshot
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict, ConversationStore
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import DeferredToolRequests
from pydantic_ai.usage import RunUsage

from .store_conformance import (
    StoreFactory,
    reply,
    saved,
    stored_entry_ids,
    transcript,
    user,
)

pytestmark = pytest.mark.anyio


# -- branch ---------------------------------------------------------------------------------------


async def test_branch_at_keeps_the_first_messages_and_leaves_the_rest_as_a_branch(
    store: ConversationStore,
) -> None:
    conversation = await saved(store, "chat", "q1", "a1", "q2", "a2")
    original = await store.load_entries("chat")
    assert original is not None

    branched = await store.branch("chat", at=2, expected_revision=conversation.revision)

    assert transcript(branched.messages) == ["q1", "a1"]
    assert branched.revision not in {None, conversation.revision}
    branched.messages += [user("q2, again"), reply("a2, again")]
    new = await store.save(branched)
    assert new[0].parent_id == original[1].id
    entries = await store.load_entries("chat")
    assert entries is not None
    assert transcript(entries) == snapshot(["q1", "a1", "q2, again", "a2, again"])
    assert [entry.id for entry in entries[:2]] == [entry.id for entry in original[:2]]
    (record,) = await store.list_conversations()
    assert record.branches == [original[-1].id]
    assert await stored_entry_ids(store) == {entry.id for entry in original + entries}


async def test_branch_back_to_a_branch_it_left(store: ConversationStore) -> None:
    conversation = await saved(store, "chat", "q1", "a1", "q2", "a2")
    original = await store.load_entries("chat")
    assert original is not None
    branched = await store.branch("chat", at=2, expected_revision=conversation.revision)
    branched.messages += [user("q2, again")]
    (new_tip,) = await store.save(branched)

    back = await store.branch("chat", from_entry=original[-1].id, expected_revision=branched.revision)

    assert transcript(back.messages) == ["q1", "a1", "q2", "a2"]
    (record,) = await store.list_conversations()
    assert (record.head_id, record.branches) == (original[-1].id, [new_tip.id])
    middle = await store.branch("chat", from_entry=new_tip.id, expected_revision=back.revision)
    assert transcript(middle.messages) == ["q1", "a1", "q2, again"]
    (record,) = await store.list_conversations()
    assert record.branches == [original[-1].id]


async def test_branch_from_an_entry_of_the_current_history(store: ConversationStore) -> None:
    conversation = await saved(store, "chat", "q1", "a1", "q2", "a2")
    entries = await store.load_entries("chat")
    assert entries is not None

    branched = await store.branch("chat", from_entry=entries[0].id, expected_revision=conversation.revision)

    assert transcript(branched.messages) == ["q1"]
    loaded = await store.load("chat")
    assert loaded is not None
    assert transcript(loaded.messages) == ["q1"]


async def test_branch_at_zero_starts_over(store: ConversationStore) -> None:
    conversation = await saved(store, "chat", "q1", "a1")

    branched = await store.branch("chat", at=0, expected_revision=conversation.revision)
    branched.messages.append(user("fresh start"))
    (entry,) = await store.save(branched)

    assert entry.parent_id is None
    loaded = await store.load("chat")
    assert loaded is not None
    assert transcript(loaded.messages) == ["fresh start"]


async def test_branch_keeps_the_pending_requests_only_when_the_head_stays(store: ConversationStore) -> None:
    requests = DeferredToolRequests(approvals=[ToolCallPart("refund", {"order": 1}, "call_1")])
    conversation = Conversation(
        conversation_id="chat",
        messages=[user("q1"), reply("a1")],
        usage=RunUsage(requests=1),
        deferred_tool_requests=requests,
    )
    await store.save(conversation)

    same = await store.branch("chat", at=2, expected_revision=conversation.revision)
    earlier = await store.branch("chat", at=1, expected_revision=same.revision)

    assert same.deferred_tool_requests == requests
    assert earlier.deferred_tool_requests is None
    assert earlier.usage == RunUsage(requests=1)
    loaded = await store.load("chat")
    assert loaded is not None
    assert loaded.deferred_tool_requests is None


async def test_branch_with_a_stale_revision_conflicts(store: ConversationStore) -> None:
    stale = await saved(store, "chat", "q1", "a1")
    revision = stale.revision
    stale.messages.append(user("q2"))
    await store.save(stale)

    with pytest.raises(ConversationConflict):
        await store.branch("chat", at=1, expected_revision=revision)
    with pytest.raises(ConversationConflict):
        await store.branch("chat", at=1, expected_revision=None)

    loaded = await store.load("chat")
    assert loaded is not None
    assert transcript(loaded.messages) == ["q1", "a1", "q2"]


async def test_branch_rejects_what_it_cannot_keep(store: ConversationStore) -> None:
    conversation = await saved(store, "chat", "q1", "a1")
    await saved(store, "other", "elsewhere")
    other = await store.load_entries("other")
    assert other is not None
    revision = conversation.revision

    with pytest.raises(UserError, match="between 0 and 2"):
        await store.branch("chat", at=3, expected_revision=revision)
    with pytest.raises(UserError, match="between 0 and 2"):
        await store.branch("chat", at=-1, expected_revision=revision)
    with pytest.raises(UserError, match="is not in the history"):
        await store.branch("chat", from_entry=other[0].id, expected_revision=revision)
    with pytest.raises(UserError, match="is not in the history"):
        await store.branch("chat", from_entry="not-an-entry", expected_revision=revision)
    with pytest.raises(UserError, match="exactly one"):
        await store.branch("chat", expected_revision=revision)
    with pytest.raises(UserError, match="exactly one"):
        await store.branch("chat", at=1, from_entry=other[0].id, expected_revision=revision)
    with pytest.raises(UserError, match="not in the store"):
        await store.branch("missing", at=0, expected_revision=None)

    loaded = await store.load("chat")
    assert loaded is not None
    assert loaded.revision == revision


# -- fork -----------------------------------------------------------------------------------------


async def test_fork_shares_the_entries_it_keeps(store: ConversationStore) -> None:
    requests = DeferredToolRequests(calls=[ToolCallPart("report", {}, "call_1")])
    conversation = Conversation(
        conversation_id="chat",
        messages=[user("q1"), reply("a1")],
        usage=RunUsage(requests=1, input_tokens=10),
        deferred_tool_requests=requests,
    )
    await store.save(conversation)
    kept = await stored_entry_ids(store)

    fork = await store.fork("chat")

    assert fork.conversation_id == IsStr()
    assert fork.conversation_id != "chat"
    assert (fork.messages, fork.usage, fork.deferred_tool_requests) == (
        conversation.messages,
        conversation.usage,
        requests,
    )
    origin, forked = await store.load_entries("chat"), await store.load_entries(fork.conversation_id)
    assert origin is not None
    assert forked is not None
    assert [entry.id for entry in forked] == [entry.id for entry in origin]
    assert await stored_entry_ids(store) == kept
    record = next(r for r in await store.list_conversations() if r.conversation_id == fork.conversation_id)
    assert dataclasses.asdict(record) == (
        {
            "conversation_id": IsStr(),
            "head_id": origin[-1].id,
            "usage": dataclasses.asdict(conversation.usage),
            "deferred_tool_requests": dataclasses.asdict(requests),
            "scope": None,
            "forked_from": "chat",
            "forked_at": origin[-1].id,
            "branches": [],
            "revision": fork.revision,
            "updated_at": IsDatetime(),
            "format_version": 1,
        }
    )


async def test_fork_part_of_a_conversation(store: ConversationStore) -> None:
    await store.save(
        Conversation(
            conversation_id="chat", messages=[user("q1"), reply("a1"), user("q2")], usage=RunUsage(requests=2)
        )
    )
    entries = await store.load_entries("chat")
    assert entries is not None

    at_two = await store.fork("chat", at=2, new_conversation_id="at two")
    from_first = await store.fork("chat", from_entry=entries[0].id, new_conversation_id="from first")
    empty = await store.fork("chat", at=0, new_conversation_id="empty")

    assert transcript(at_two.messages) == ["q1", "a1"]
    assert at_two.usage == RunUsage()
    assert transcript(from_first.messages) == ["q1"]
    assert empty.messages == []
    records = {record.conversation_id: record for record in await store.list_conversations()}
    assert (records["at two"].forked_at, records["from first"].forked_at, records["empty"].forked_at) == (
        entries[1].id,
        entries[0].id,
        None,
    )


async def test_fork_from_a_branch_the_conversation_left(store: ConversationStore) -> None:
    conversation = await saved(store, "chat", "q1", "a1", "q2", "a2")
    left = await store.load_entries("chat")
    assert left is not None
    await store.branch("chat", at=1, expected_revision=conversation.revision)

    fork = await store.fork("chat", from_entry=left[2].id, new_conversation_id="fork")

    assert transcript(fork.messages) == ["q1", "a1", "q2"]


async def test_fork_into_a_stored_id_conflicts(store: ConversationStore) -> None:
    await saved(store, "chat", "q1")
    await store.fork("chat", new_conversation_id="fork")

    with pytest.raises(ConversationConflict):
        await store.fork("chat", at=0, new_conversation_id="fork")
    with pytest.raises(ConversationConflict):
        await store.fork("chat", at=0, new_conversation_id="chat")

    loaded = await store.load("chat")
    assert loaded is not None
    assert transcript(loaded.messages) == ["q1"]


async def test_fork_rejects_what_it_cannot_keep(store: ConversationStore) -> None:
    await saved(store, "chat", "q1", "a1")

    with pytest.raises(UserError, match="not in the store"):
        await store.fork("missing")
    with pytest.raises(UserError, match="between 0 and 2"):
        await store.fork("chat", at=3)
    with pytest.raises(UserError, match="exactly one"):
        await store.fork("chat", at=1, from_entry="x")
    with pytest.raises(UserError, match="is not in the history"):
        await store.fork("chat", from_entry="not-an-entry")

    assert [record.conversation_id for record in await store.list_conversations()] == ["chat"]


async def test_a_fork_and_its_origin_carry_on_independently(store_factory: StoreFactory) -> None:
    store = await store_factory()
    await saved(store, "chat", "q1", "a1")
    fork = await store.fork("chat", new_conversation_id="fork")
    origin = await store.load("chat")
    assert origin is not None

    origin.messages += [user("origin q2")]
    fork.messages += [user("fork q2"), reply("fork a2")]
    await store.save(origin)
    await store.save(fork)

    fresh = await store_factory()
    loaded_origin, loaded_fork = await fresh.load_entries("chat"), await fresh.load_entries("fork")
    assert loaded_origin is not None
    assert loaded_fork is not None
    assert transcript(loaded_origin) == ["q1", "a1", "origin q2"]
    assert transcript(loaded_fork) == ["q1", "a1", "fork q2", "fork a2"]
    assert [entry.id for entry in loaded_fork[:2]] == [entry.id for entry in loaded_origin[:2]]


# -- list_conversations ---------------------------------------------------------------------------


async def test_list_newest_save_first_with_scope_and_limit(store: ConversationStore) -> None:
    first = await saved(store, "first", "q", scope="alice")
    await saved(store, "second", "q", scope="bob")
    await saved(store, "third", "q", scope="alice")
    first.messages.append(reply("a"))
    await store.save(first)

    async def listed(*, scope: str | None = None, limit: int | None = None) -> list[str]:
        return [record.conversation_id for record in await store.list_conversations(scope=scope, limit=limit)]

    assert await listed() == ["first", "third", "second"]
    assert await listed(scope="alice") == ["first", "third"]
    assert await listed(scope="carol") == []
    assert await listed(limit=2) == ["first", "third"]
    assert await listed(scope="alice", limit=1) == ["first"]
    assert await listed(limit=0) == []
    records = await store.list_conversations()
    assert [record.updated_at for record in records] == sorted(
        (record.updated_at for record in records), reverse=True
    )


# -- delete ---------------------------------------------------------------------------------------


async def test_delete_removes_the_conversation_and_its_entries(store: ConversationStore) -> None:
    await saved(store, "chat", "q1", "a1")
    await saved(store, "other", "q1")

    await store.delete("chat")
    await store.delete("chat")  # Deleting what isn't there is not an error.

    assert await store.load("chat") is None
    assert await store.load_entries("chat") is None
    assert [record.conversation_id for record in await store.list_conversations()] == ["other"]
    other = await store.load_entries("other")
    assert other is not None
    assert await stored_entry_ids(store) == {other[0].id}


async def test_a_scoped_delete_leaves_another_scopes_conversation(store: ConversationStore) -> None:
    await saved(store, "chat", "q1", scope="alice")

    await store.delete("chat", scope="bob")
    assert await store.load("chat") is not None

    await store.delete("chat", scope="alice")
    assert await store.load("chat") is None


async def test_saving_a_conversation_deleted_since_it_was_loaded_conflicts(store: ConversationStore) -> None:
    stale = await saved(store, "chat", "q1")
    await store.delete("chat")
    stale.messages.append(user("q2"))

    with pytest.raises(ConversationConflict):
        await store.save(stale)

    await saved(store, "chat", "new q1")  # Created again under the same id: a new revision.
    with pytest.raises(ConversationConflict):
        await store.save(stale)
    loaded = await store.load("chat")
    assert loaded is not None
    assert transcript(loaded.messages) == ["new q1"]


async def test_deleting_the_origin_of_a_fork_keeps_everything_the_fork_reaches(
    store_factory: StoreFactory,
) -> None:
    store = await store_factory()
    await saved(store, "origin", "q1", "a1", "q2", "a2")
    fork = await store.fork("origin", new_conversation_id="fork")
    origin_tip = (await store.load_entries("origin") or [])[-1]
    # The fork leaves the origin's last turn as a branch, so only its branches still reach it.
    branched = await store.branch("fork", at=2, expected_revision=fork.revision)
    branched.messages += [user("fork q2"), reply("fork a2")]
    await store.save(branched)
    origin = await store.load("origin")
    assert origin is not None
    origin.messages += [user("origin q3"), reply("origin a3")]
    await store.save(origin)

    await store.delete("origin")

    fresh = await store_factory()
    forked = await fresh.load_entries("fork")
    assert forked is not None
    assert transcript(forked) == ["q1", "a1", "fork q2", "fork a2"]
    (record,) = await fresh.list_conversations()
    assert record.branches == [origin_tip.id]
    assert transcript(await fresh.read_history(origin_tip.id)) == ["q1", "a1", "q2", "a2"]
    back = await fresh.branch("fork", from_entry=origin_tip.id, expected_revision=record.revision)
    assert transcript(back.messages) == ["q1", "a1", "q2", "a2"]
    stored = await stored_entry_ids(fresh)
    assert len(stored) == 6, "the origin's last turn alone is released"

    await fresh.delete("fork")

    assert await stored_entry_ids(fresh) == set()


async def test_deleting_a_fork_keeps_its_origin(store: ConversationStore) -> None:
    await saved(store, "origin", "q1", "a1")
    fork = await store.fork("origin", new_conversation_id="fork")
    fork.messages.append(user("fork q2"))
    await store.save(fork)

    await store.delete("fork")

    loaded = await store.load("origin")
    assert loaded is not None
    assert transcript(loaded.messages) == ["q1", "a1"]
    assert len(await stored_entry_ids(store)) == 2
