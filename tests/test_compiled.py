"""`store.compiled`: statements compiled once per dialect name and driver, whatever the engine; pooled
connections taken for the hot path in one greenlet, driver errors raised as SQLAlchemy's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic_ai.conversation import Conversation
from sqlalchemy import exc
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect

from store import SqlConversationStore, compiled
from store.compiled import per_dialect
from store.engine import create_engine, dispose, normalize_url
from store.histories import statements
from store.sqlite_driver import run_on_thread

from .conftest import MigratedDatabases
from .store_conformance import dump, reply, user

pytestmark = pytest.mark.anyio


async def test_every_engine_of_a_dialect_shares_the_statements_compiled_for_the_first(tmp_path: Path) -> None:
    first = create_engine(normalize_url(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}"))
    second = create_engine(normalize_url(f"sqlite+aiosqlite:///{tmp_path / 'b.db'}"))
    try:
        assert first.dialect is not second.dialect
        assert statements(first.dialect) is statements(second.dialect)
    finally:
        await dispose(first)
        await dispose(second)


def test_a_dialect_name_driver_and_key_each_build_once() -> None:
    built: list[tuple[str, str, int]] = []

    @per_dialect
    def build(dialect: Dialect, key: int) -> tuple[str, str, int]:
        built.append((dialect.name, dialect.driver, key))
        return built[-1]

    asyncpg, psycopg = postgresql.asyncpg.dialect(), postgresql.psycopg.dialect()
    assert build(asyncpg, 1) is build(postgresql.asyncpg.dialect(), 1)
    build(asyncpg, 2)
    build(psycopg, 1)
    assert built == [("postgresql", "asyncpg", 1), ("postgresql", "asyncpg", 2), ("postgresql", "psycopg", 1)]


@pytest.fixture(params=["sqlite", "postgresql"])
async def url(request: pytest.FixtureRequest, migrated_databases: MigratedDatabases) -> str:
    return await migrated_databases.empty(request.param)


async def test_a_load_and_a_save_each_take_their_connection_in_one_greenlet(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Taking a pooled connection costs a greenlet (SQLAlchemy's pool awaits through one); giving it
    # back in another doubled that, ~45 µs of a ~1 ms turn at 10 messages.
    spawned: list[str] = []
    spawn = compiled.greenlet_spawn

    async def counting(function: Callable[..., Any], *args: Any, **named: Any) -> Any:
        spawned.append(getattr(function, "__name__", repr(function)))
        return await spawn(function, *args, **named)

    store = await SqlConversationStore.connect(url, migrate=False)
    try:
        await store.save(Conversation(conversation_id="chat", messages=[user("q"), reply("a")]))
        monkeypatch.setattr(compiled, "greenlet_spawn", counting)
        conversation = await store.load("chat")
        assert conversation is not None
        conversation.messages.extend([user("next"), reply("answer")])
        await store.save(conversation)
        assert len(spawned) == 2  # the load's checkout, the save's
        again = await store.load("chat")
        assert again is not None
        assert dump(again.messages) == dump(conversation.messages)
    finally:
        await store.aclose()


async def test_a_driver_error_in_checked_out_work_is_sqlalchemys_and_the_connection_goes_back(
    url: str,
) -> None:
    engine = create_engine(normalize_url(url))

    async def broken(pooled: Any) -> None:
        if engine.dialect.name == "sqlite":
            await run_on_thread(pooled.dbapi_connection, lambda connection: connection.execute("SELECT nope"))
        else:
            await pooled.driver_connection.fetch("SELECT nope")

    try:
        with pytest.raises(exc.DBAPIError) as raised:
            await compiled.checked_out(engine, "SELECT nope", broken)
        assert not raised.value.connection_invalidated
        assert "nope" in str(raised.value.orig)
        pool: Any = engine.sync_engine.pool
        assert pool.checkedout() == 0
        async with engine.connect() as connection:  # the connection is usable again
            assert (await connection.execute(sa.text("SELECT 1"))).scalar() == 1
    finally:
        await dispose(engine)
