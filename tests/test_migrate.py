"""Schema migrations: from an empty database, from every earlier revision, and refusals."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from pydantic_ai.conversation_store import ConversationRecord
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, UserPromptPart
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from store import SchemaTooNew, SqlConversationStore, codec, current_revision, head_revision, upgrade
from store.engine import create_engine, dispose, normalize_url
from store.migrate import alembic_config
from store.schema import metadata, now_utc

pytestmark = pytest.mark.anyio


def _revisions() -> list[str]:
    """Every revision, oldest first."""
    script = ScriptDirectory.from_config(alembic_config())
    return [revision.revision for revision in reversed(list(script.walk_revisions()))]


def _schema_drift(connection: Connection) -> list[object]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, metadata))


async def test_connect_creates_the_schema_on_an_empty_database(database_url: str) -> None:
    engine = create_engine(normalize_url(database_url))
    try:
        assert await current_revision(engine) is None
        store = await SqlConversationStore.connect(database_url)
        await store.aclose()
        assert await current_revision(engine) == head_revision()
        async with engine.connect() as connection:
            # The migrations build exactly the tables the code declares.
            assert await connection.run_sync(_schema_drift) == []
    finally:
        await dispose(engine)


@pytest.mark.parametrize("previous", [None, *_revisions()[:-1]], ids=lambda r: f"from-{r or 'empty'}")
async def test_upgrade_from_each_earlier_revision_keeps_the_data(
    database_url: str, previous: str | None
) -> None:
    engine = create_engine(normalize_url(database_url))
    try:
        if previous is not None:
            await upgrade(engine, target=previous)
        assert await current_revision(engine) == previous
        original = [ModelRequest(parts=[UserPromptPart("hello")], instructions="Be brief.")]
        if previous is not None:
            # A database at an older revision that already holds a conversation keeps it.
            await _plant(engine, "kept", original)
        assert await upgrade(engine) == previous
        assert await current_revision(engine) == head_revision()
        store = SqlConversationStore(engine)
        if previous is not None:
            kept = await store.load("kept")
            assert kept is not None
            assert ModelMessagesTypeAdapter.dump_json(kept.messages) == ModelMessagesTypeAdapter.dump_json(
                original
            )
    finally:
        await dispose(engine)


async def _plant(engine: AsyncEngine, conversation_id: str, messages: list[ModelMessage]) -> None:
    """Store a conversation as every revision before 0011 did: each message whole, instructions
    inline, in the columns `0001_conversations` created (the store's code writes today's)."""
    entries = metadata.tables["conversation_entries"]
    records = metadata.tables["conversation_records"]
    parent_id: str | None = None
    async with engine.begin() as connection:
        for message in messages:
            entry_id = str(uuid.uuid4())
            await connection.execute(
                sa.insert(entries).values(
                    entry_id=entry_id,
                    parent_id=parent_id,
                    kind="message",
                    message=codec.encode_message(message),
                )
            )
            parent_id = entry_id
        record = ConversationRecord(
            conversation_id=conversation_id, head_id=parent_id, revision="1", updated_at=now_utc()
        )
        await connection.execute(
            sa.insert(records).values(codec.record_values(record) | {"family_id": conversation_id})
        )


async def test_connect_is_idempotent_and_safe_in_parallel(database_url: str) -> None:
    stores = await asyncio.gather(*(SqlConversationStore.connect(database_url) for _ in range(4)))
    for store in stores:
        await store.aclose()
    again = await SqlConversationStore.connect(database_url)
    try:
        assert await current_revision(again.engine) == head_revision()
    finally:
        await again.aclose()


async def test_the_first_connections_to_new_sqlite_files_in_parallel_all_succeed(tmp_path: Path) -> None:
    # Switching a new file to WAL takes its exclusive lock, and SQLite refuses a second connection
    # doing the same at once without waiting: before it was retried, most of these rounds failed.
    for round_ in range(10):
        url = f"sqlite+aiosqlite:///{tmp_path / f'{round_}.db'}"
        stores = await asyncio.gather(*(SqlConversationStore.connect(url) for _ in range(6)))
        try:
            async with stores[0].engine.connect() as connection:
                mode = (await connection.exec_driver_sql("PRAGMA journal_mode")).scalar_one()
            assert mode == "wal"
            assert await current_revision(stores[0].engine) == head_revision()
        finally:
            for store in stores:
                await store.aclose()


async def test_a_database_newer_than_the_code_is_refused(database_url: str) -> None:
    store = await SqlConversationStore.connect(database_url)
    async with store.engine.begin() as connection:
        await connection.execute(sa.text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
    await store.aclose()
    with pytest.raises(SchemaTooNew) as raised:
        await SqlConversationStore.connect(database_url)
    assert "'9999_from_the_future'" in str(raised.value)
    assert "upgrade durable-chat" in str(raised.value)


async def test_connect_without_migrating_leaves_the_database_alone(database_url: str) -> None:
    store = await SqlConversationStore.connect(database_url, migrate=False)
    try:
        assert await current_revision(store.engine) is None
    finally:
        await store.aclose()
