"""PostgreSQL connections: settings to options, session timeouts, a pool that outlives its connections."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.engine import make_url

from store import ConnectionOptions, Database, DatabaseUnavailable
from store.engine import reader, translate_errors
from web import Settings, SettingsError

from .conftest import new_database

pytestmark = pytest.mark.anyio

_BASE = {"DURABLE_CHAT_DATABASE_URL": "postgresql://u@h/db", "DURABLE_CHAT_SECRET": "s"}


def test_the_servers_defaults_time_out() -> None:
    assert Settings.load(environ=_BASE).connection_options() == ConnectionOptions(
        pool_size=30,
        max_overflow=0,
        pre_ping=False,
        statement_timeout=30.0,
        lock_timeout=10.0,
        idle_in_transaction_timeout=60.0,
        transaction_pooler=False,
    )


def test_connection_settings_come_from_the_environment() -> None:
    environ = _BASE | {
        "DURABLE_CHAT_STATEMENT_TIMEOUT": "2.5",
        "DURABLE_CHAT_LOCK_TIMEOUT": "0",
        "DURABLE_CHAT_IDLE_IN_TRANSACTION_TIMEOUT": "0",
        "DURABLE_CHAT_POOL_SIZE": "3",
        "DURABLE_CHAT_POOL_MAX_OVERFLOW": "0",
        "DURABLE_CHAT_POOL_PRE_PING": "on",
        "DURABLE_CHAT_TRANSACTION_POOLER": "true",
        "DURABLE_CHAT_LISTEN_URL": "postgresql://u@direct/db",
    }
    settings = Settings.load(environ=environ)
    assert settings.connection_options() == ConnectionOptions(
        pool_size=3,
        max_overflow=0,
        pre_ping=True,
        statement_timeout=2.5,
        lock_timeout=None,
        idle_in_transaction_timeout=None,
        transaction_pooler=True,
    )
    assert settings.listen_url == "postgresql://u@direct/db"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("POOL_SIZE", "0", "DURABLE_CHAT_POOL_SIZE must be a positive whole number, not '0'"),
        ("POOL_SIZE", "2.5", "DURABLE_CHAT_POOL_SIZE must be a positive whole number, not '2.5'"),
        (
            "POOL_MAX_OVERFLOW",
            "-1",
            "DURABLE_CHAT_POOL_MAX_OVERFLOW must be a non-negative whole number, not '-1'",
        ),
        (
            "STATEMENT_TIMEOUT",
            "soon",
            "DURABLE_CHAT_STATEMENT_TIMEOUT must be a non-negative number, not 'soon'",
        ),
        ("POOL_PRE_PING", "maybe", "DURABLE_CHAT_POOL_PRE_PING must be 1 or 0 (true or false), not 'maybe'"),
    ],
)
def test_a_bad_connection_setting_is_named(name: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.load(environ=_BASE | {f"DURABLE_CHAT_{name}": value})
    assert str(raised.value) == message


@given(st.text(max_size=12))
def test_any_flag_value_is_a_boolean_or_refused(value: str) -> None:
    environ = _BASE | {"DURABLE_CHAT_TRANSACTION_POOLER": value}
    word = value.strip().lower()
    if value and word not in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
        with pytest.raises(SettingsError, match="DURABLE_CHAT_TRANSACTION_POOLER must be 1 or 0"):
            Settings.load(environ=environ)
    else:
        assert Settings.load(environ=environ).transaction_pooler is (word in {"1", "true", "yes", "on"})


async def _sleep(db: Database, seconds: float) -> None:
    with translate_errors("sleeping"):
        async with db.engine.connect() as connection:
            await connection.execute(sa.text("SELECT pg_sleep(:seconds)"), {"seconds": seconds})


async def _show(db: Database, name: str) -> tuple[str, str]:
    """The setting as the writer's and the reader's sessions see it."""
    async with db.engine.connect() as connection:
        written = (await connection.execute(sa.text(f"SHOW {name}"))).scalar_one()
    async with reader(db.engine).connect() as connection:
        read = (await connection.execute(sa.text(f"SHOW {name}"))).scalar_one()
    return written, read


@pytest.mark.postgres
async def test_sessions_carry_the_timeouts(tmp_path: Path) -> None:
    options = ConnectionOptions(statement_timeout=1.5, lock_timeout=0.25, idle_in_transaction_timeout=60)
    async with (
        new_database("postgresql", tmp_path) as url,
        await Database.connect(url, options=options) as db,
    ):
        assert await _show(db, "statement_timeout") == ("1500ms", "1500ms")
        assert await _show(db, "lock_timeout") == ("250ms", "250ms")
        assert await _show(db, "idle_in_transaction_session_timeout") == ("1min", "1min")
        # A statement past its timeout: the database cannot serve it now, a 503 to retry.
        with pytest.raises(DatabaseUnavailable) as raised:
            await _sleep(db, 5)
        assert "canceling statement due to statement timeout" in str(raised.value)


@pytest.mark.postgres
async def test_behind_a_transaction_pooler_no_session_setting_is_sent(tmp_path: Path) -> None:
    options = ConnectionOptions(statement_timeout=1.5, transaction_pooler=True)
    async with (
        new_database("postgresql", tmp_path) as url,
        await Database.connect(url, options=options) as db,
    ):
        thread = await db.threads.create(user_id="u")
        assert (await db.threads.get(thread.thread_id)).user_id == "u"
        assert await _show(db, "statement_timeout") == ("0", "0")


@pytest.mark.postgres
@pytest.mark.parametrize("pre_ping", [True, False])
async def test_a_pool_recovers_when_its_connections_die(tmp_path: Path, pre_ping: bool) -> None:
    async with (
        new_database("postgresql", tmp_path) as url,
        await Database.connect(url, options=ConnectionOptions(pre_ping=pre_ping)) as db,
    ):
        thread = await db.threads.create(user_id="u")
        await db.threads.get(thread.thread_id)
        # What a database restart does to pooled connections: the server ends them.
        admin = await asyncpg.connect(make_url(url).set(drivername="postgresql").render_as_string(False))
        try:
            ended = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        finally:
            await admin.close()
        assert ended >= 2  # the writer's and the reader's pooled connections
        if not pre_ping:
            # Found by the first operation on each pool (reads, writes): a 503 to retry, and the
            # pool starts afresh.
            with pytest.raises(DatabaseUnavailable, match=r"went away|broke"):
                await db.threads.get(thread.thread_id)
            with pytest.raises(DatabaseUnavailable, match=r"went away|broke"):
                await db.threads.create(user_id="v")
        assert (await db.threads.get(thread.thread_id)).user_id == "u"
        await db.threads.create(user_id="w")
