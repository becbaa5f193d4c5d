"""The `ConversationStore` conformance suite: pydantic-ai's semantics, checked on every backend.

Each test runs on pydantic-ai's `InMemoryConversationStore` (the reference) and on our
`SqlConversationStore` over SQLite and PostgreSQL, through the `store`/`store_factory` fixtures.
"""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa
from dirty_equals import IsStr
from hypothesis import given, settings
from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation, ConversationTypeAdapter
from pydantic_ai.conversation_store import ConversationConflict, ConversationStore, InMemoryConversationStore
from pydantic_ai.exceptions import UserError
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RunUsage

from store import CorruptData, SqlConversationStore
from store.schema import ConversationEntryRow

from .conftest import MigratedDatabases
from .messages import (
    full_fidelity_conversation,
    full_fidelity_deferred_tool_requests,
    full_fidelity_usage,
    realistic_turn,
)
from .statements import sent_statements
from .store_conformance import (
    Operation,
    Reopen,
    StoreFactory,
    apply,
    dump,
    observe,
    operations,
    reply,
    saved,
    stored_entry_ids,
    transcript,
    turns,
    user,
)

pytestmark = pytest.mark.anyio


# -- save and load ------------------------------------------------------------------------------


async def test_save_then_load_through_a_new_store(store_factory: StoreFactory) -> None:
    store = await store_factory()
    messages = turns(4)
    conversation = Conversation(conversation_id="chat", messages=messages, usage=RunUsage(requests=4))

    entries = await store.save(conversation)

    assert [entry.message for entry in entries] == messages
    assert [entry.parent_id for entry in entries] == [None, *(entry.id for entry in entries[:-1])]
    assert conversation.revision == IsStr()
    assert conversation.new_message_index == len(messages)
    loaded = await (await store_factory()).load("chat")
    assert loaded is not None
    assert dump(loaded.messages) == dump(messages)
    assert (loaded.conversation_id, loaded.revision, loaded.usage) == (
        "chat",
        conversation.revision,
        RunUsage(requests=4),
    )
    assert loaded.new_message_index == len(messages)


async def test_unknown_conversation_loads_as_none(store: ConversationStore) -> None:
    assert await store.load("nope") is None
    assert await store.load_entries("nope") is None
    assert await store.list_conversations() == []


async def test_save_appends_only_the_new_messages(store_factory: StoreFactory) -> None:
    store = await store_factory()
    conversation = Conversation(conversation_id="chat", messages=realistic_turn(0))
    first = await store.save(conversation)
    conversation.messages += realistic_turn(1)

    second = await store.save(conversation)

    assert [entry.message for entry in second] == realistic_turn(1)
    assert second[0].parent_id == first[-1].id
    loaded = await (await store_factory()).load_entries("chat")
    assert loaded is not None
    assert [entry.id for entry in loaded] == [entry.id for entry in first + second]
    assert await stored_entry_ids(store) == {entry.id for entry in first + second}


async def test_save_with_nothing_new_stores_nothing_and_advances_the_revision(
    store: ConversationStore,
) -> None:
    conversation = Conversation(conversation_id="chat", messages=turns(2))
    await store.save(conversation)
    revision = conversation.revision
    kept = await stored_entry_ids(store)

    assert await store.save(conversation) == []
    assert conversation.revision != revision
    assert await stored_entry_ids(store) == kept


async def test_continuing_a_loaded_conversation_appends_to_it(store_factory: StoreFactory) -> None:
    await saved(await store_factory(), "chat", "q1", "a1")
    store = await store_factory()
    loaded = await store.load("chat")
    assert loaded is not None
    loaded.messages += [user("q2"), reply("a2")]

    entries = await store.save(loaded)

    assert transcript(entries) == ["q2", "a2"]
    again = await (await store_factory()).load("chat")
    assert again is not None
    assert transcript(again.messages) == ["q1", "a1", "q2", "a2"]


async def test_saving_a_run_result_appends_the_run(store: ConversationStore) -> None:
    agent = Agent(TestModel(custom_output_text="pong"))
    conversation = await store.load("run") or Conversation(conversation_id="run")
    first = await agent.run("ping", conversation=conversation)
    assert len(await store.save(first)) == 2

    second = await agent.run("ping again", conversation=first.conversation)
    assert len(await store.save(second)) == 2

    loaded = await store.load("run")
    assert loaded is not None
    assert loaded.messages == second.all_messages()
    assert loaded.revision == second.conversation.revision
    assert loaded.usage.requests == 2


async def test_a_conversation_that_went_through_json_appends(store: ConversationStore) -> None:
    await store.save(Conversation(conversation_id="chat", messages=turns(3)))
    for limit in (None, 2):
        loaded = await store.load("chat", limit=limit)
        assert loaded is not None
        revived = ConversationTypeAdapter.validate_json(ConversationTypeAdapter.dump_json(loaded))
        revived.messages += [user(f"after json, limit={limit}")]

        entries = await store.save(revived)

        assert transcript(entries) == [f"after json, limit={limit}"]
    whole = await store.load("chat")
    records = await store.list_conversations()
    assert whole is not None
    assert dump(whole.messages) == dump(
        [*turns(3), user("after json, limit=None"), user("after json, limit=2")]
    )
    assert records[0].branches == []
    assert len(await stored_entry_ids(store)) == len(whole.messages)


async def test_a_rewritten_history_branches_off_the_last_shared_message(store: ConversationStore) -> None:
    await saved(store, "chat", "q1", "a1", "q2", "a2")
    before = await store.load_entries("chat")
    loaded = await store.load("chat")
    assert before is not None
    assert loaded is not None
    loaded.messages[2] = user("q2, edited")

    entries = await store.save(loaded)

    assert transcript(entries) == ["q2, edited", "a2"]
    assert entries[0].parent_id == before[1].id
    (record,) = await store.list_conversations()
    assert record.branches == [before[-1].id]
    after = await store.load("chat")
    assert after is not None
    assert transcript(after.messages) == ["q1", "a1", "q2, edited", "a2"]


# -- full fidelity ------------------------------------------------------------------------------


async def test_every_message_part_and_the_conversation_state_survive_a_reload(
    store_factory: StoreFactory,
) -> None:
    messages = full_fidelity_conversation()
    conversation = Conversation(
        conversation_id="fidelity",
        messages=messages,
        usage=full_fidelity_usage(),
        deferred_tool_requests=full_fidelity_deferred_tool_requests(),
    )
    await (await store_factory()).save(conversation)

    fresh = await store_factory()
    loaded = await fresh.load("fidelity")
    entries = await fresh.load_entries("fidelity")

    assert loaded is not None
    assert entries is not None
    assert dump(loaded.messages) == dump(messages)
    assert dump([entry.message for entry in entries]) == dump(messages)
    assert loaded.usage == full_fidelity_usage()
    assert loaded.deferred_tool_requests == full_fidelity_deferred_tool_requests()
    assert loaded.deferred_tool_requests.kind("call_question") == "question"
    assert ConversationTypeAdapter.dump_json(loaded) == ConversationTypeAdapter.dump_json(conversation)


# -- revisions and concurrent writers -----------------------------------------------------------


async def test_saving_a_stale_revision_conflicts(store_factory: StoreFactory) -> None:
    await saved(await store_factory(), "chat", "q1", "a1")
    first, second = await store_factory(), await store_factory()
    mine, theirs = await first.load("chat"), await second.load("chat")
    assert mine is not None
    assert theirs is not None
    mine.messages.append(user("mine"))
    theirs.messages.append(user("theirs"))
    await first.save(mine)
    kept = await stored_entry_ids(first)

    with pytest.raises(ConversationConflict) as conflict:
        await second.save(theirs)

    assert conflict.value.conversation_id == "chat"
    loaded = await second.load("chat")
    assert loaded is not None
    assert transcript(loaded.messages) == ["q1", "a1", "mine"]
    assert await stored_entry_ids(first) == kept


async def test_saving_a_new_conversation_under_a_stored_id_conflicts(store: ConversationStore) -> None:
    await saved(store, "chat", "q1")

    with pytest.raises(ConversationConflict):
        await saved(store, "chat", "another q1")

    loaded = await store.load("chat")
    assert loaded is not None
    assert transcript(loaded.messages) == ["q1"]


async def test_a_conversation_created_elsewhere_after_a_load_found_it_missing_conflicts(
    store_factory: StoreFactory,
) -> None:
    mine, theirs = await store_factory(), await store_factory()
    assert await mine.load("late") is None
    await saved(theirs, "late", "theirs")

    with pytest.raises(ConversationConflict):
        await mine.save(Conversation(conversation_id="late", messages=[user("mine")]))

    loaded = await mine.load("late")
    assert loaded is not None
    assert transcript(loaded.messages) == ["theirs"]


def _verb(sql: str) -> str:
    return sql.split()[0].upper()


async def test_saving_what_a_load_just_found_missing_reads_nothing(database_url: str) -> None:
    async with await SqlConversationStore.connect(database_url) as store:
        await _save_after_a_missing_load(store)


async def _save_after_a_missing_load(store: SqlConversationStore) -> None:
    assert await store.load("fresh") is None
    with sent_statements(store.engine, _verb) as statements:
        await store.save(Conversation(conversation_id="fresh", messages=[user("q1")]))
        first = list(statements)
        # The next new conversation was never looked up: its save reads its record first.
        await store.save(Conversation(conversation_id="unlooked", messages=[user("q1")]))

    assert "SELECT" not in first
    assert "SELECT" in statements[len(first) :]
    loaded = await store.load("fresh")
    assert loaded is not None
    assert transcript(loaded.messages) == ["q1"]


async def test_the_store_remembers_one_record_per_conversation_not_one_per_save(database_url: str) -> None:
    # Kept by revision, a soaking server held a record for each of its last 4,096 saves (~5 MB).
    async with await SqlConversationStore.connect(database_url) as store:
        conversations = [Conversation(conversation_id=f"chat-{n}") for n in range(3)]
        for turn in range(5):
            for conversation in conversations:
                conversation.messages += [user(f"q{turn}"), reply(f"a{turn}")]
                await store.save(conversation)

        assert store.known_records() == 3
        with sent_statements(store.engine, _verb) as statements:
            # Continuing the revision it remembers, a save reads no record.
            conversations[0].messages += [user("q5")]
            await store.save(conversations[0])
        assert statements
        assert "SELECT" not in statements
        await store.delete("chat-1")
        assert store.known_records() == 2


def _outcome(result: list[object] | BaseException) -> str:
    if isinstance(result, ConversationConflict):
        return "conflict"
    if isinstance(result, BaseException):
        raise result
    return "saved"


async def test_concurrent_saves_of_one_revision_through_two_stores_one_wins(
    store_factory: StoreFactory,
) -> None:
    await saved(await store_factory(), "race", "start")
    first, second = await store_factory(), await store_factory()
    winners: list[str] = ["start"]
    for round_ in range(20):
        mine, theirs = await first.load("race"), await second.load("race")
        assert mine is not None
        assert theirs is not None
        mine.messages.append(user(f"round {round_}: first"))
        theirs.messages.append(user(f"round {round_}: second"))

        results = await asyncio.gather(first.save(mine), second.save(theirs), return_exceptions=True)

        outcomes = [_outcome(result) for result in results]
        assert sorted(outcomes) == ["conflict", "saved"], f"round {round_}"
        winners.append(f"round {round_}: {'first' if outcomes[0] == 'saved' else 'second'}")
        loaded = await second.load("race")
        assert loaded is not None
        assert transcript(loaded.messages) == winners
    assert len(await stored_entry_ids(first)) == len(winners)


async def test_concurrent_creates_of_one_conversation_one_wins(store_factory: StoreFactory) -> None:
    stores = [await store_factory() for _ in range(6)]
    for round_ in range(5):
        conversation_id = f"race-{round_}"
        attempts = [
            Conversation(conversation_id=conversation_id, messages=[user(f"writer {n}")])
            for n in range(len(stores))
        ]

        results = await asyncio.gather(
            *(store.save(attempt) for store, attempt in zip(stores, attempts, strict=True)),
            return_exceptions=True,
        )

        outcomes = [_outcome(result) for result in results]
        assert sorted(outcomes) == [*["conflict"] * (len(stores) - 1), "saved"]
        loaded = await stores[0].load(conversation_id)
        assert loaded is not None
        assert transcript(loaded.messages) == [f"writer {outcomes.index('saved')}"]
    assert len(await stored_entry_ids(stores[0])) == 5


# -- scopes -------------------------------------------------------------------------------------


async def test_another_scope_sees_nothing_and_changes_nothing(store: ConversationStore) -> None:
    await saved(store, "chat", "q1", "a1", scope="alice")
    loaded = await store.load("chat")
    assert loaded is not None

    assert await store.load("chat", scope="bob") is None
    assert await store.load_entries("chat", scope="bob") is None
    assert await store.list_conversations(scope="bob") == []
    with pytest.raises(ConversationConflict):
        await store.save(loaded, scope="bob")
    with pytest.raises(UserError, match="not in the store") as branch_error:
        await store.branch("chat", at=1, expected_revision=loaded.revision, scope="bob")
    with pytest.raises(UserError, match="not in the store") as fork_error:
        await store.fork("chat", source_scope="bob")
    await store.delete("chat", scope="bob")

    assert {branch_error.type, fork_error.type} == {UserError}
    assert await store.load("chat", scope="alice") == loaded
    assert [record.conversation_id for record in await store.list_conversations(scope="alice")] == ["chat"]


async def test_the_own_scope_or_none_reaches_a_scoped_conversation(store: ConversationStore) -> None:
    await saved(store, "chat", "q1", scope="alice")
    loaded = await store.load("chat", scope="alice")
    assert loaded is not None
    loaded.messages.append(reply("a1"))

    await store.save(loaded)  # No scope: keeps the one it was saved with.
    fork = await store.fork("chat", source_scope="alice", new_conversation_id="fork")
    other = await store.fork("chat", new_conversation_id="bob's fork", scope="bob")

    assert transcript(fork.messages) == ["q1", "a1"]
    assert {record.conversation_id for record in await store.list_conversations(scope="alice")} == {
        "chat",
        "fork",
    }
    assert [record.conversation_id for record in await store.list_conversations(scope="bob")] == [
        other.conversation_id
    ]
    await store.delete("chat", scope="alice")
    assert await store.load("chat") is None


# -- load(limit=) and load_entries ----------------------------------------------------------------


async def test_load_with_a_limit_returns_the_last_messages(store: ConversationStore) -> None:
    conversation = await saved(store, "chat", "q1", "a1", "q2", "a2", "q3", "a3")

    last_two = await store.load("chat", limit=2)
    entries = await store.load_entries("chat", limit=2)

    assert last_two is not None
    assert entries is not None
    assert transcript(last_two.messages) == ["q3", "a3"]
    assert transcript(entries) == ["q3", "a3"]
    assert last_two.revision == conversation.revision
    none = await store.load("chat", limit=0)
    assert none is not None
    assert none.messages == []
    everything = await store.load("chat", limit=100)
    assert everything is not None
    assert transcript(everything.messages) == ["q1", "a1", "q2", "a2", "q3", "a3"]


async def test_saving_a_limited_load_appends_to_the_whole_conversation(store: ConversationStore) -> None:
    await saved(store, "chat", "q1", "a1", "q2", "a2")
    window = await store.load("chat", limit=1)
    assert window is not None
    window.messages.append(user("q3"))

    assert transcript(await store.save(window)) == ["q3"]

    whole = await store.load("chat")
    assert whole is not None
    assert transcript(whole.messages) == ["q1", "a1", "q2", "a2", "q3"]


async def test_a_negative_limit_is_an_error(store: ConversationStore) -> None:
    await saved(store, "chat", "q1")
    with pytest.raises(UserError, match="must not be negative"):
        await store.load("chat", limit=-1)
    with pytest.raises(UserError, match="must not be negative"):
        await store.load_entries("chat", limit=-1)
    with pytest.raises(UserError, match="must not be negative"):
        await store.list_conversations(limit=-1)


async def test_load_entries_gives_each_message_its_stored_entry(store: ConversationStore) -> None:
    conversation = Conversation(conversation_id="chat", messages=turns(3))
    saved_entries = await store.save(conversation)

    entries = await store.load_entries("chat")

    assert entries is not None
    assert [(entry.id, entry.parent_id, entry.kind) for entry in entries] == [
        (entry.id, entry.parent_id, "message") for entry in saved_entries
    ]
    assert dump([entry.message for entry in entries]) == dump(conversation.messages)


# -- corrupt data (SQL only) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(b"\xff\xfe not json", id="not-json"),
        pytest.param(b'{"kind": "request", "parts": [{"part_kind": 3}]}', id="not-a-message"),
    ],
)
async def test_a_corrupt_message_fails_the_load_and_names_its_entry(
    database_url: str, garbage: bytes
) -> None:
    # Without a history cache: its copy of the history was validated before the row went bad.
    store = SqlConversationStore(
        (await SqlConversationStore.connect(database_url)).engine, history_cache_bytes=0
    )
    try:
        await saved(store, "chat", "q1", "a1", "q2", "a2")
        await saved(store, "other", "fine")
        entries = await store.load_entries("chat")
        assert entries is not None
        corrupt = entries[1].id
        async with store.engine.begin() as connection:
            await connection.execute(
                sa.update(ConversationEntryRow)
                .where(ConversationEntryRow.entry_id == corrupt)
                .values(message=garbage)
            )

        with pytest.raises(CorruptData) as load_error:
            await store.load("chat")
        with pytest.raises(CorruptData) as load_entries_error:
            await store.load_entries("chat")
        with pytest.raises(CorruptData):
            await store.fork("chat", new_conversation_id="fork")

        for error in (load_error.value, load_entries_error.value):
            assert repr(corrupt) in str(error)
            assert "'chat'" in str(error)
        assert await store.load("fork") is None
        other = await store.load("other")
        assert other is not None
        assert transcript(other.messages) == ["fine"]
    finally:
        await store.aclose()


# -- the same observable behaviour as the reference ---------------------------------------------


@settings(max_examples=25, deadline=None)
@given(steps=operations)
async def test_random_operations_behave_as_on_the_in_memory_store(
    steps: list[Operation], migrated_databases: MigratedDatabases
) -> None:
    url = await migrated_databases.empty("sqlite")
    reference = InMemoryConversationStore()
    sql = await SqlConversationStore.connect(url)
    try:
        for step, operation in enumerate(steps):
            if isinstance(operation, Reopen):
                await sql.aclose()
                sql = await SqlConversationStore.connect(url)
            expected = await apply(reference, operation, step)
            actual = await apply(sql, operation, step)
            assert actual == expected, f"step {step}: {operation}"
            assert await observe(sql) == await observe(reference), f"after step {step}: {operation}"
    finally:
        await sql.aclose()
