"""Instructions stored once: a request's entry names them by digest, a load puts them back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, UserPromptPart

from store import CorruptData, SqlConversationStore, codec
from store.instructions import KEEP_CLAIMED, KEEP_UNUSED, release_unused
from store.schema import InstructionsRow, metadata, now_utc

from .conftest import MigratedDatabases
from .store_conformance import reply

pytestmark = pytest.mark.anyio

_texts = metadata.tables[InstructionsRow.__tablename__]
PROMPT = 'You are "terse".\nAnswer in one line, é. ' * 100


@pytest.fixture(params=["sqlite", "postgresql"])
async def url(request: pytest.FixtureRequest, migrated_databases: MigratedDatabases) -> str:
    return await migrated_databases.empty(request.param)


@pytest.fixture
async def stores(url: str) -> AsyncIterator[Any]:
    opened: list[SqlConversationStore] = []

    async def open_one() -> SqlConversationStore:
        store = await SqlConversationStore.connect(url)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        await store.aclose()


def _request(text: str, instructions: str | None = PROMPT) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text)], instructions=instructions)


def _dump(messages: list[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


async def _stored(store: SqlConversationStore) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    async with store.engine.connect() as connection:
        entries = (
            await connection.execute(sa.text("SELECT message, instructions_id FROM conversation_entries"))
        ).all()
        texts = (
            await connection.execute(sa.text("SELECT instructions_id, text FROM conversation_instructions"))
        ).all()
    return [tuple(row) for row in entries], [tuple(row) for row in texts]


async def test_the_instructions_are_stored_once_and_a_load_gives_back_what_was_saved(stores: Any) -> None:
    writer = await stores()
    messages: list[ModelMessage] = [
        _request("one"),
        reply("first"),
        _request("two"),
        reply("second"),
        _request("no instructions", None),
    ]
    await writer.save(Conversation(conversation_id="a", messages=messages[:2]))
    loaded = await writer.load("a")
    assert loaded is not None
    loaded.messages.extend(messages[2:])
    await writer.save(loaded)
    other = [_request("other")]
    await writer.save(Conversation(conversation_id="b", messages=other))

    entries, texts = await _stored(writer)
    digest = codec.encode_entry(messages[0])[1]
    assert [(row[0], bytes(row[1])) for row in texts] == [(digest, codec.encode_entry(messages[0])[2])]
    assert sorted(str(row[1]) for row in entries) == sorted([digest] * 3 + ["None"] * 3)
    assert all(PROMPT.encode()[:40] not in bytes(row[0]) for row in entries)

    # A store that knows nothing yet reads the text from the database: the same conversation.
    reader = await stores()
    for conversation_id, expected in (("a", messages), ("b", other)):
        fresh = await reader.load(conversation_id)
        assert fresh is not None
        assert _dump(fresh.messages) == _dump(expected)
    record = await reader.read_record("a")
    assert record is not None
    assert record.head_id is not None
    history = await (await stores()).read_history(record.head_id)
    assert _dump([entry.message for entry in history]) == _dump(messages)
    first = await (await stores()).read_entry(history[0].id)
    assert _dump([first.message]) == _dump(messages[:1])


async def test_a_message_naming_instructions_not_stored_is_corrupt(stores: Any) -> None:
    store = await stores()
    await store.save(Conversation(conversation_id="a", messages=[_request("one")]))
    async with store.engine.begin() as connection:
        await connection.execute(sa.text("DELETE FROM conversation_instructions"))

    fresh = await stores()
    with pytest.raises(CorruptData, match=r"names instructions '[0-9a-f]{32}' that are not stored"):
        await fresh.load("a")


async def test_releasing_keeps_the_named_and_the_lately_claimed(stores: Any) -> None:
    store = await stores()
    one = [_request("one")]
    await store.save(Conversation(conversation_id="kept", messages=one))
    await store.save(Conversation(conversation_id="gone", messages=[_request("two", "Only here.")]))
    await store.save(Conversation(conversation_id="fresh", messages=[_request("three", "Just now.")]))
    for conversation_id in ("gone", "fresh"):
        await store.delete(conversation_id)
    async with store.engine.begin() as connection:
        # Claimed before the grace: the text of "fresh" is claimed again, as a writer does.
        await connection.execute(
            _texts.update().values(used_at=now_utc() - KEEP_UNUSED - timedelta(minutes=1))
        )
        await connection.execute(
            _texts.update()
            .where(_texts.c.instructions_id == codec.encode_entry(_request("", "Just now."))[1])
            .values(used_at=now_utc())
        )

    async with store.engine.begin() as connection:
        assert await release_unused(connection) == 1
    _, texts = await _stored(store)
    assert sorted(bytes(row[1]) for row in texts) == sorted(
        [codec.encode_entry(_request(""))[2], b'"Just now."']
    )
    kept = await (await stores()).load("kept")
    assert kept is not None
    assert _dump(kept.messages) == _dump(one)


async def test_erasing_a_conversation_deletes_its_texts_that_nothing_else_names_nor_may_name(
    stores: Any,
) -> None:
    store = await stores()
    await store.save(Conversation(conversation_id="kept", messages=[_request("one")]))
    gone = [
        _request("two"),
        reply("ok"),
        _request("three", "Ada's own."),
        reply("ok"),
        _request("4", "Lately."),
    ]
    await store.save(Conversation(conversation_id="gone", messages=gone))
    lately = codec.encode_entry(_request("", "Lately."))[1]
    async with store.engine.begin() as connection:
        # Claimed long ago, but "Lately.", which a writer claimed within a claim's trust.
        await connection.execute(
            _texts.update()
            .where(_texts.c.instructions_id != lately)
            .values(used_at=now_utc() - KEEP_CLAIMED - timedelta(minutes=1))
        )
    await store.delete("gone")
    _, texts = await _stored(store)
    # "Ada's own." went with the conversation; the prompt "kept" names too stays, and so does the
    # text a writer may still name under its claim.
    assert sorted(bytes(row[1]) for row in texts) == sorted(
        [codec.encode_entry(_request(""))[2], b'"Lately."']
    )
    # That writer, trusting its claim, names it again in another conversation: it is there to load.
    five = [_request("five", "Lately.")]
    await store.save(Conversation(conversation_id="again", messages=five))
    again = await (await stores()).load("again")
    assert again is not None
    assert _dump(again.messages) == _dump(five)
