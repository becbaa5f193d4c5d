"""The cache of validated histories: no whole-history decode per turn, correct across workers and branches.

Decodes are counted through the codec (`store.codec.decode_messages`), statements through
SQLAlchemy's events and the hot path's observer, trips to SQLite's thread on aiosqlite itself:
nothing here is timed.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aiosqlite
import pytest
import sqlalchemy as sa
from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy.engine import make_url

from store import DatabaseUnavailable, SqlConversationStore, codec, history_cache
from store.compiled import observing
from store.engine import create_engine, normalize_url, reader
from store.history_cache import CACHE_ENV, CachedHistory, HistoryCache, Undecoded, budget_from_env

from .conftest import MigratedDatabases
from .store_conformance import dump, reply, transcript, turns, user

pytestmark = pytest.mark.anyio


class Decodes:
    """How many stored messages the codec validated."""

    def __init__(self) -> None:
        self.rows = 0


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> Decodes:
    counted = Decodes()
    decode = codec.decode_messages

    def counting(
        rows: Sequence[tuple[str, bytes]], *, where: str, instructions: Mapping[str, bytes] = {}
    ) -> list[ModelMessage]:
        counted.rows += len(rows)
        return decode(rows, where=where, instructions=instructions)

    monkeypatch.setattr(codec, "decode_messages", counting)
    return counted


@pytest.fixture(params=["sqlite", "postgresql"])
async def url(request: pytest.FixtureRequest, migrated_databases: MigratedDatabases) -> str:
    return await migrated_databases.empty(request.param)


@pytest.fixture
async def open_store(url: str) -> AsyncIterator[Any]:
    opened: list[SqlConversationStore] = []

    async def open_one(budget: int | None = None) -> SqlConversationStore:
        store = await SqlConversationStore.connect(url)
        if budget is not None:
            store = SqlConversationStore(store.engine, history_cache_bytes=budget)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        await store.aclose()


async def _loaded(store: SqlConversationStore, conversation_id: str) -> Conversation:
    conversation = await store.load(conversation_id)
    assert conversation is not None
    return conversation


async def _truth(url: str, conversation_id: str) -> bytes:
    """The stored history as a new worker without a cache reads it."""
    async with await SqlConversationStore.connect(url) as fresh:
        cold = SqlConversationStore(fresh.engine, history_cache_bytes=0)
        return dump((await _loaded(cold, conversation_id)).messages)


async def test_a_save_decodes_nothing_and_a_load_after_it_only_the_new_messages(
    open_store: Any, url: str, decodes: Decodes
) -> None:
    store: SqlConversationStore = await open_store()
    await store.save(Conversation(conversation_id="chat", messages=turns(5)))
    assert decodes.rows == 0  # kept as saved, validated back when a load first reads them

    conversation = await _loaded(store, "chat")
    await _loaded(store, "chat")
    assert decodes.rows == len(turns(5))
    assert dump(conversation.messages) == await _truth(url, "chat")

    conversation.messages.extend([user("q"), reply("a")])
    decodes.rows = 0
    await store.save(conversation)
    again = await _loaded(store, "chat")
    assert decodes.rows == 2
    assert dump(again.messages) == await _truth(url, "chat")
    assert transcript(again.messages)[-2:] == ["q", "a"]


async def test_saves_no_load_reads_are_never_decoded_and_one_load_decodes_them_all_once(
    open_store: Any, url: str, decodes: Decodes
) -> None:
    # A run's checkpoints add to its history one after the other, and a thread's last turn or a
    # delegated agent's conversation is seldom read again: none of that is decoded until a load.
    store: SqlConversationStore = await open_store()
    conversation = Conversation(conversation_id="chat", messages=turns(2))
    await store.save(conversation)
    for question in ("q1", "q2"):
        conversation.messages.extend([user(question), reply(f"a {question}")])
        await store.save(conversation)
    assert decodes.rows == 0
    loaded = await _loaded(store, "chat")
    assert decodes.rows == len(turns(2)) + 4
    assert dump(loaded.messages) == await _truth(url, "chat")


async def test_a_cold_load_decodes_the_history_once(open_store: Any, decodes: Decodes) -> None:
    writer: SqlConversationStore = await open_store()
    await writer.save(Conversation(conversation_id="chat", messages=turns(3)))
    other: SqlConversationStore = await open_store()
    decodes.rows = 0

    first = await _loaded(other, "chat")
    second = await _loaded(other, "chat")

    assert decodes.rows == len(turns(3))
    assert dump(first.messages) == dump(second.messages)
    assert first.messages is not second.messages


async def test_another_worker_appending_is_seen_and_only_its_messages_are_read(
    open_store: Any, url: str, decodes: Decodes
) -> None:
    mine: SqlConversationStore = await open_store()
    theirs: SqlConversationStore = await open_store()
    await mine.save(Conversation(conversation_id="chat", messages=turns(5)))
    elsewhere = await _loaded(theirs, "chat")
    elsewhere.messages.extend([user("theirs"), reply("answered elsewhere")])
    await theirs.save(elsewhere)
    decodes.rows = 0

    seen = await _loaded(mine, "chat")

    assert transcript(seen.messages)[-2:] == ["theirs", "answered elsewhere"]
    assert seen.revision == elsewhere.revision
    # Its own save, kept as saved until now, and the tail after the head it had cached, read: not
    # the whole history read again.
    assert decodes.rows == len(turns(5)) + 2
    assert dump(seen.messages) == await _truth(url, "chat")
    seen.messages.extend([user("mine again"), reply("ok")])
    await mine.save(seen)
    assert transcript((await _loaded(theirs, "chat")).messages)[-2:] == ["mine again", "ok"]


async def test_a_save_that_conflicts_leaves_the_cache_as_it_was(open_store: Any, url: str) -> None:
    mine: SqlConversationStore = await open_store()
    theirs: SqlConversationStore = await open_store()
    await mine.save(Conversation(conversation_id="chat", messages=turns(2)))
    stale = await _loaded(mine, "chat")
    cached = mine.history_cache.head_of("chat")
    assert cached is not None
    elsewhere = await _loaded(theirs, "chat")
    elsewhere.messages.extend([user("theirs"), reply("first")])
    await theirs.save(elsewhere)

    # Its history is decoded while the write is in flight; the write fails in the database.
    stale.messages.extend([user("mine"), reply("too late")])
    with pytest.raises(ConversationConflict):
        await mine.save(stale)

    assert mine.history_cache.head_of("chat") is cached
    seen = await _loaded(mine, "chat")
    assert transcript(seen.messages)[-2:] == ["theirs", "first"]
    assert dump(seen.messages) == await _truth(url, "chat")


async def test_branches_and_forks_get_their_own_histories(open_store: Any, url: str) -> None:
    store: SqlConversationStore = await open_store()
    await store.save(
        Conversation(conversation_id="chat", messages=[user("q1"), reply("a1"), user("q2"), reply("a2")])
    )
    loaded = await _loaded(store, "chat")

    branched = await store.branch("chat", at=2, expected_revision=loaded.revision)
    branched.messages.extend([user("q2 edited"), reply("a2 again")])
    await store.save(branched)
    forked = await store.fork("chat", at=1, new_conversation_id="fork")
    forked.messages.append(reply("a1 forked"))
    await store.save(forked)

    chat = await _loaded(store, "chat")
    fork = await _loaded(store, "fork")
    assert transcript(chat.messages) == ["q1", "a1", "q2 edited", "a2 again"]
    assert transcript(fork.messages) == ["q1", "a1 forked"]
    assert dump(chat.messages) == await _truth(url, "chat")
    assert dump(fork.messages) == await _truth(url, "fork")
    tip = (await store.load_entries("chat", limit=1) or [])[0]
    back = await store.branch("chat", from_entry=tip.parent_id, expected_revision=chat.revision)
    assert transcript(back.messages) == ["q1", "a1", "q2 edited"]
    assert transcript((await _loaded(store, "chat")).messages) == ["q1", "a1", "q2 edited"]


async def test_the_budget_evicts_the_least_recently_used_histories(open_store: Any, decodes: Decodes) -> None:
    store: SqlConversationStore = await open_store(budget=200_000)
    for number in range(8):
        await store.save(Conversation(conversation_id=f"chat-{number}", messages=turns(10)))

    cache = store.history_cache
    assert 0 < cache.used <= cache.budget
    assert 0 < len(cache) < 8
    await _loaded(store, "chat-7")  # the most recent, still cached: its saved messages decoded now
    decodes.rows = 0
    await _loaded(store, "chat-7")
    assert decodes.rows == 0
    await _loaded(store, "chat-0")  # the oldest: evicted, read again
    assert decodes.rows == len(turns(10))


async def test_a_history_grown_a_turn_at_a_time_is_copied_together_every_twice_its_square_root(
    open_store: Any, url: str
) -> None:
    # Each load decodes the last turn's messages, scattered in memory among everything made
    # meanwhile; once 32 (and twice the square root of the history's length) were added, the load
    # copies the whole history together. Between copies a load hands out the same objects.
    store: SqlConversationStore = await open_store()
    conversation = Conversation(conversation_id="chat", messages=[])
    copied_at: list[int] = []
    previous: list[ModelMessage] = []
    for turn in range(180):
        conversation.messages.extend([user(f"q{turn}"), reply(f"a{turn}")])
        await store.save(conversation)
        conversation = await _loaded(store, "chat")
        if previous and conversation.messages[0] is not previous[0]:
            copied_at.append(len(conversation.messages))
            assert dump(conversation.messages[: len(previous)]) == dump(previous)
        previous = conversation.messages
    assert copied_at == [32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 354]
    assert dump(conversation.messages) == await _truth(url, "chat")


def _chat(count: int) -> list[ModelMessage]:
    """`count` messages, a question and its answer in turn."""
    return [user(f"q{n // 2}") if n % 2 == 0 else reply(f"a{n // 2}") for n in range(count)]


def _unpacked(messages: Sequence[ModelMessage]) -> CachedHistory:
    """A history whose messages were all added since it was last copied, as saves leave one."""
    ids = tuple((f"0190a0a0-0000-7000-8000-{n:012}", None) for n in range(len(messages)))
    return CachedHistory((), ()).saved(Undecoded(ids, lambda: list(messages)), (10,) * len(messages))


def test_a_copy_is_equal_and_new_sharing_only_what_cannot_change() -> None:
    result = ToolReturnPart(
        "lookup", content={"order": {"items": [1, 2]}, "status": "shipped"}, tool_call_id="c"
    )
    messages = [*_chat(30), ModelRequest(parts=[result]), reply("done")]
    copied = [entry.message for entry in _unpacked(messages).packed()]
    assert copied == messages
    assert all(new is not old for new, old in zip(copied, messages, strict=True))
    part = copied[-2].parts[0]
    assert isinstance(part, ToolReturnPart)
    assert part is not result
    assert part.content is not result.content
    assert part.content["order"]["items"] is not result.content["order"]["items"]
    assert part.content["status"] is result.content["status"]  # a string: shared
    assert copied[-2].timestamp is messages[-2].timestamp


def test_a_history_too_deep_to_copy_stays_as_it_is_and_is_not_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nested: list[Any] = []
    for _ in range(sys.getrecursionlimit()):
        nested = [nested]
    deep = ModelRequest(parts=[ToolReturnPart("tool", content=nested, tool_call_id="c")])
    history = _unpacked([*_chat(30), deep, reply("done")])
    copies: list[object] = []
    copy = history_cache._copy

    def counted(value: Any) -> Any:
        copies.append(value)
        return copy(value)

    monkeypatch.setattr(history_cache, "_copy", counted)
    first = history.packed()
    assert first[-2].message is deep
    tried = len(copies)
    assert tried > 0
    assert history.packed() is first
    assert len(copies) == tried  # not tried again at the next load


def test_the_charge_counts_the_stored_bytes() -> None:
    cache = HistoryCache(budget=15_000)
    entries = tuple(
        _entry(f"0190a0a0-0000-7000-8000-00000000000{i}", message) for i, message in enumerate(turns(1))
    )
    history = CachedHistory(entries, (1_000,) * len(entries))
    cache.put("chat", history)
    assert cache.used == history.charge > 4_000
    cache.put("other", CachedHistory(entries[:2], (1_000, 1_000)))
    assert cache.used <= cache.budget
    assert cache.get(history.entries[-1].id) is None  # evicted: the least recently used
    cache.forget("other")
    assert (cache.used, len(cache)) == (0, 0)


def _entry(entry_id: str, message: ModelMessage) -> Any:
    from pydantic_ai.conversation_store import ConversationEntry

    return ConversationEntry(id=entry_id, parent_id=None, message=message)


async def test_without_a_cache_every_load_decodes_and_stays_correct(
    open_store: Any, url: str, decodes: Decodes
) -> None:
    store: SqlConversationStore = await open_store(budget=0)
    await store.save(Conversation(conversation_id="chat", messages=turns(2)))
    decodes.rows = 0
    conversation = await _loaded(store, "chat")
    conversation.messages.extend([user("q"), reply("a")])
    await store.save(conversation)
    again = await _loaded(store, "chat")
    assert decodes.rows == len(turns(2)) + len(turns(2)) + 2
    assert len(store.history_cache) == 0
    assert dump(again.messages) == await _truth(url, "chat")


def test_the_budget_comes_from_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    assert budget_from_env() == 64 * 1024 * 1024
    monkeypatch.setenv(CACHE_ENV, "0")
    assert budget_from_env() == 0
    monkeypatch.setenv(CACHE_ENV, "1.5")
    assert budget_from_env() == 1536 * 1024
    for wrong in ("-1", "lots", "nan"):
        monkeypatch.setenv(CACHE_ENV, wrong)
        with pytest.raises(ValueError, match=CACHE_ENV):
            budget_from_env()


async def test_a_run_on_a_cached_history_leaves_the_cache_as_stored(open_store: Any, url: str) -> None:
    # pydantic-ai appends to the list it is given, and fills in run metadata on the last request
    # of a history it continues (on its own copy today): neither may reach the cached history.
    store: SqlConversationStore = await open_store()
    await store.save(Conversation(conversation_id="chat", messages=[*turns(1), user("asked before the run")]))
    conversation = await _loaded(store, "chat")
    stored = len(conversation.messages)

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("answered")])

    result = await Agent(FunctionModel(answer)).run(conversation=conversation)
    assert result.output == "answered"
    again = await _loaded(store, "chat")
    assert len(again.messages) == stored
    assert dump(again.messages) == await _truth(url, "chat")

    # The last message is handed out as a copy: filling it in changes only the caller's.
    again.messages[-1].run_id = "filled in by the caller"
    again.messages.append(reply("not saved"))
    third = await _loaded(store, "chat")
    assert (len(third.messages), third.messages[-1].run_id) == (stored, None)
    assert dump(third.messages) == await _truth(url, "chat")


async def test_a_turn_costs_the_same_statements_and_trips_at_10_and_1000_messages(
    open_store: Any, url: str
) -> None:
    store: SqlConversationStore = await open_store()
    counts = [await _turn_cost(store, f"chat-{size}", size) for size in (10, 1_000)]
    assert counts[0] == counts[1]
    statements, trips = counts[0]
    if url.startswith("sqlite"):
        assert statements == ["SELECT", "INSERT", "UPDATE"]  # the record; the new entries; the record
        assert trips == 0  # a load, a save (its commit included): each a unit on the loop's thread
    else:
        assert statements == ["SELECT", "WITH"]  # the record; the entries and the record in one statement


async def _turn_cost(store: SqlConversationStore, conversation_id: str, size: int) -> tuple[list[str], int]:
    """The statements and SQLite trips (to aiosqlite's thread) of a load and a save of one turn, at `size` messages."""
    messages = turns(size // 4 + 1)[:size]
    await store.save(Conversation(conversation_id=conversation_id, messages=messages))
    statements: list[str] = []

    def count(_connection: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement.split()[0].upper())

    trips = 0
    queued = aiosqlite.Connection._execute  # pyright: ignore[reportPrivateUsage]

    async def counting(self: aiosqlite.Connection, *args: Any, **kwargs: Any) -> Any:
        nonlocal trips
        trips += 1
        return await queued(self, *args, **kwargs)

    engines = [store.engine.sync_engine, reader(store.engine).sync_engine]
    for engine in engines:
        sa.event.listen(engine, "before_cursor_execute", count)
    aiosqlite.Connection._execute = counting  # type: ignore[method-assign]  # pyright: ignore[reportAttributeAccessIssue]
    try:
        with observing(lambda sql: count(None, None, sql)):
            conversation = await _loaded(store, conversation_id)
            conversation.messages.extend([user("next"), reply("answer")])
            await store.save(conversation)
    finally:
        aiosqlite.Connection._execute = queued  # type: ignore[method-assign]  # pyright: ignore[reportAttributeAccessIssue]
        for engine in engines:
            sa.event.remove(engine, "before_cursor_execute", count)
    return statements, trips


@pytest.mark.parametrize("url", ["postgresql"], indirect=True)
async def test_a_database_gone_at_checkout_is_unavailable_not_a_crash(url: str) -> None:
    # The hot path takes connections from the pool directly; a failure to connect must still
    # surface as the store's DatabaseUnavailable (a 503, a run that waits), as through SQLAlchemy.
    gone = make_url(url).set(database="dc_no_such_database")
    store = SqlConversationStore(create_engine(normalize_url(gone)))
    try:
        with pytest.raises(DatabaseUnavailable):
            await store.load("chat")
        with pytest.raises(DatabaseUnavailable):
            await store.save(Conversation(conversation_id="chat", messages=[user("q")]))
    finally:
        await store.aclose()
