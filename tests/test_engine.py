"""Database URLs and connection failures: each refused with an error that names the problem."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import event

from store import DatabaseUnavailable, SqlConversationStore, UnsupportedDatabase
from store.engine import create_engine, dispose, normalize_url, reader, redacted
from tests.conftest import new_database

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("given_url", "expected"),
    [
        ("sqlite:///data/x.db", "sqlite+aiosqlite:///data/x.db"),
        ("sqlite+aiosqlite:///data/x.db", "sqlite+aiosqlite:///data/x.db"),
        ("postgresql://u@h/db", "postgresql+asyncpg://u@h/db"),
        ("postgres://u@h/db", "postgresql+asyncpg://u@h/db"),
        ("postgresql+asyncpg://u:secret@h:5433/db", "postgresql+asyncpg://u:***@h:5433/db"),
    ],
)
def test_supported_urls_get_their_async_driver(given_url: str, expected: str) -> None:
    assert normalize_url(given_url).render_as_string(hide_password=True) == expected


@pytest.mark.parametrize(
    ("given_url", "named"),
    [
        ("mysql://root@localhost/chat", "dialect 'mysql'"),
        ("oracle+oracledb://u:pw@h/db", "dialect 'oracle'"),
        ("sqlite+pysqlite:///x.db", "driver 'sqlite+pysqlite'"),
        ("postgresql+psycopg2://u@h/db", "driver 'postgresql+psycopg2'"),
        ("not a url", "is not a database URL"),
    ],
)
def test_unsupported_urls_are_refused_by_name(given_url: str, named: str) -> None:
    with pytest.raises(UnsupportedDatabase) as raised:
        normalize_url(given_url)
    assert named in str(raised.value)


def test_passwords_never_reach_error_messages() -> None:
    with pytest.raises(UnsupportedDatabase) as raised:
        normalize_url("mysql://root:hunter2@localhost/chat")
    assert "hunter2" not in str(raised.value)
    assert redacted("postgresql://u:hunter2@h/db") == "postgresql://u:***@h/db"


@given(st.text(max_size=60))
def test_any_string_is_either_a_supported_url_or_a_clear_refusal(text: str) -> None:
    try:
        url = normalize_url(text)
    except UnsupportedDatabase:
        return
    assert url.drivername in {"sqlite+aiosqlite", "postgresql+asyncpg"}


async def test_an_unreachable_postgresql_is_named() -> None:
    # Port 1 on loopback: nothing listens there, so the connection is refused at once.
    with pytest.raises(DatabaseUnavailable) as raised:
        await SqlConversationStore.connect("postgresql+asyncpg://postgres:pw@127.0.0.1:1/chat")
    message = str(raised.value)
    assert "postgresql+asyncpg://postgres:***@127.0.0.1:1/chat" in message
    assert "pw@" not in message


async def test_a_sqlite_file_in_a_missing_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(DatabaseUnavailable) as raised:
        await SqlConversationStore.connect(f"sqlite+aiosqlite:///{tmp_path}/missing/chat.db")
    assert "missing/chat.db" in str(raised.value)


async def test_a_missing_postgresql_database_is_unavailable_not_a_crash(tmp_path: Path) -> None:
    async with new_database("postgresql", tmp_path) as database_url:
        missing = sa.make_url(database_url).set(database="dc_no_such_database")
        with pytest.raises(DatabaseUnavailable) as raised:
            await SqlConversationStore.connect(missing)
    assert "dc_no_such_database" in str(raised.value)


async def test_a_disposed_store_reconnects_on_next_use(database_url: str) -> None:
    store = await SqlConversationStore.connect(database_url)
    await store.aclose()
    # Disposing only empties the pool: a late call opens a new connection rather than crashing.
    try:
        assert await store.load("nothing") is None
    finally:
        await store.aclose()


def test_a_saturated_pool_is_reported_as_unavailable() -> None:
    from sqlalchemy import exc

    from store.engine import translate_errors

    with pytest.raises(DatabaseUnavailable) as raised, translate_errors("saving conversation 'c'"):
        raise exc.TimeoutError("QueuePool limit of size 10 overflow 20 reached")
    assert str(raised.value) == "saving conversation 'c' failed: no database connection was free in time"


async def test_a_burst_of_readers_opens_its_connections_once(database_url: str) -> None:
    # The readers' pool keeps every connection it opens (no overflow, closed on return): a second
    # burst as large as the first opens none.
    engine = create_engine(normalize_url(database_url))
    readers = reader(engine)
    opened: list[object] = []
    event.listen(readers.sync_engine, "connect", lambda connection, _record: opened.append(connection))

    async def burst(size: int) -> None:
        together = asyncio.Barrier(size)

        async def hold() -> None:
            async with readers.connect() as connection:
                await connection.execute(sa.text("SELECT 1"))
                await together.wait()

        await asyncio.gather(*(hold() for _ in range(size)))

    # Beyond what the pools kept before (SQLite's readers 5 and 10 of overflow, PostgreSQL's 20 and 10).
    size = 12 if database_url.startswith("sqlite") else 25
    try:
        await burst(size)
        assert len(opened) == size
        await burst(size)
        assert len(opened) == size
    finally:
        await dispose(engine)
