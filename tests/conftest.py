"""Fixtures shared by the tests: databases and conversation stores, as factories.

`database_url` gives a fresh, empty database per test, on SQLite and on PostgreSQL. `store_factory`
opens conversation stores on pydantic-ai's in-memory store, SQLite and PostgreSQL, so one suite checks
every backend against the same `ConversationStore` semantics.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import NoReturn

import asyncpg
import pydantic_ai.models
import pytest
from pydantic_ai.conversation_store import ConversationStore, InMemoryConversationStore
from sqlalchemy.engine import make_url

from store import SqlConversationStore

from .store_conformance import StoreFactory

pydantic_ai.models.ALLOW_MODEL_REQUESTS = False

POSTGRES_URL_VARIABLE = "DURABLE_CHAT_TEST_POSTGRES_URL"

_SQL_BACKENDS = [
    pytest.param("sqlite"),
    pytest.param("postgresql", marks=pytest.mark.postgres),
]


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=_SQL_BACKENDS)
async def database_url(request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str) -> AsyncIterator[str]:
    """The URL of a fresh, empty database, dropped after the test."""
    async with new_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture(params=[pytest.param("memory"), *_SQL_BACKENDS])
async def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str
) -> AsyncIterator[StoreFactory]:
    """Opens stores on one fresh database, as separate processes would; closes them all after the test.

    The in-memory backend has nothing to share between instances, so it returns the same store every
    call: what one "instance" saved, the next one sees, as with a database.
    """
    if request.param == "memory":
        memory = InMemoryConversationStore()

        async def same_store() -> ConversationStore:
            return memory

        yield same_store
        return

    opened: list[SqlConversationStore] = []
    async with new_database(request.param, tmp_path) as url:

        async def open_store() -> ConversationStore:
            store = await SqlConversationStore.connect(url)
            opened.append(store)
            return store

        try:
            yield open_store
        finally:
            for store in opened:
                await store.aclose()


@pytest.fixture
async def store(store_factory: StoreFactory) -> ConversationStore:
    """A store on the test's backend; open more on the same database with `store_factory`."""
    return await store_factory()


@asynccontextmanager
async def new_database(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    """Create an empty database on `backend` and yield its URL; drop it afterwards."""
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / f'{uuid.uuid4().hex}.db'}"
        return
    server_url = _postgres_server_url()
    name = f"dc_test_{uuid.uuid4().hex[:16]}"
    admin_dsn = make_url(server_url).set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        admin = await asyncpg.connect(admin_dsn, timeout=5)
    except (OSError, asyncpg.PostgresError, TimeoutError) as error:
        _unavailable(f"PostgreSQL at {make_url(server_url)!s} is unreachable: {type(error).__name__}: {error}")
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


def _postgres_server_url() -> str:
    url = os.environ.get(POSTGRES_URL_VARIABLE)
    if not url:
        _unavailable(
            f"{POSTGRES_URL_VARIABLE} is not set; set it to a server the tests may create databases on, "
            "such as postgresql+asyncpg://postgres@127.0.0.1:5432/test"
        )
    return url


def _unavailable(reason: str) -> NoReturn:
    # CI must run the PostgreSQL tests: a missing server there is a broken pipeline, not a skip.
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)
