"""Fixtures shared by the tests: databases and conversation stores, as factories.

`database_url` gives a new, empty database per test, on SQLite and on PostgreSQL. `store_factory`
opens conversation stores on pydantic-ai's in-memory store, SQLite and PostgreSQL, so one suite checks
every backend against the same `ConversationStore` semantics.

Every test runs traced, as a server does: the session installs a tracer provider whose spans, redacted
as in production, go to an in-memory exporter (`spans`), emptied after each test.

PostgreSQL runs on the server `DURABLE_CHAT_TEST_POSTGRES_URL` names (the tests create and drop their
own databases there). Without it the PostgreSQL tests skip, or fail when `CI=true`.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from graphlib import TopologicalSorter
from pathlib import Path
from typing import Any, Literal, NoReturn

import asyncpg
import httpx
import pydantic_ai.models
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai.conversation_store import ConversationStore, InMemoryConversationStore
from sqlalchemy.engine import make_url

from agent import RuntimeOptions, open_runtime
from agent.demo import shop_app
from agent.tracing import RedactingSpanExporter
from store import SqlConversationStore

from .browser import browser, context, page  # noqa: F401  (the browser tests' fixtures)
from .core_app import CoreFactory, core_app
from .live_server import LiveServer, live_server, sqlite_url
from .scripted import Script
from .step_app import App, AppFactory
from .store_conformance import StoreFactory
from .store_workers import open_worker  # noqa: F401  (store-level workers, for test_leases and test_checkpoints)
from .travel import airline, travel_project, travel_server  # noqa: F401  (the travel desk's processes)

pydantic_ai.models.ALLOW_MODEL_REQUESTS = False

TRACE_SECRET = "trace-test-secret-7f3a"
"""A configured secret of the test session's tracer provider: redacted from every exported span."""
_SPANS = InMemorySpanExporter()
_tracer_provider = TracerProvider()
_tracer_provider.add_span_processor(SimpleSpanProcessor(RedactingSpanExporter(_SPANS, [TRACE_SECRET])))
trace.set_tracer_provider(_tracer_provider)

POSTGRES_URL_VARIABLE = "DURABLE_CHAT_TEST_POSTGRES_URL"

Backend = Literal["sqlite", "postgresql"]

_SQL_BACKENDS = [
    pytest.param("sqlite"),
    pytest.param("postgresql", marks=pytest.mark.postgres),
]


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans the test ended so far, redacted as exported; emptied after every test."""
    _SPANS.clear()
    yield _SPANS
    _SPANS.clear()


@pytest.fixture(params=_SQL_BACKENDS)
async def database_url(
    request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str
) -> AsyncIterator[str]:
    """The URL of a new, empty database (no schema yet), dropped after the test."""
    async with new_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture(scope="session")
async def migrated_databases(
    tmp_path_factory: pytest.TempPathFactory, anyio_backend: str
) -> AsyncIterator[MigratedDatabases]:
    """Empty databases with the current schema, for tests of what is stored rather than of migrations."""
    databases = MigratedDatabases(tmp_path_factory.mktemp("migrated"))
    try:
        yield databases
    finally:
        await databases.aclose()


@pytest.fixture(params=[pytest.param("memory"), *_SQL_BACKENDS])
async def store_factory(
    request: pytest.FixtureRequest, migrated_databases: MigratedDatabases
) -> AsyncIterator[StoreFactory]:
    """Opens stores on one empty database, as separate processes would; closes them all after the test.

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
    url = await migrated_databases.empty(request.param)

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
async def new_database(backend: Backend, tmp_path: Path) -> AsyncIterator[str]:
    """Create a new, empty database on `backend`, yield its URL, and drop it afterwards."""
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / f'{uuid.uuid4().hex}.db'}"
        return
    server_url = _postgres_server_url()
    admin = await _connect(server_url)
    name = f"dc_test_{uuid.uuid4().hex[:16]}"
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield _with_database(server_url, name)
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


class MigratedDatabases:
    """Empty databases holding the current schema, without running the migrations for every test.

    SQLite gets a new file per call, copied from one the migrations ran on. PostgreSQL gets one
    database for the session, emptied on every call: creating a database per test costs half a second
    or more on a busy server, `TRUNCATE` a tenth of one, and deleting a test's few rows milliseconds.
    """

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._sqlite_template: Path | None = None
        self._admin: asyncpg.Connection | None = None
        self._postgres: asyncpg.Connection | None = None
        self._postgres_name = f"dc_test_{uuid.uuid4().hex[:16]}"
        self._postgres_url = ""
        self._emptying = ""

    async def empty(self, backend: Backend) -> str:
        """The URL of an empty database: a new one on SQLite, the session's emptied on PostgreSQL."""
        if backend == "sqlite":
            return await self._new_sqlite()
        return await self._emptied_postgres()

    async def aclose(self) -> None:
        if self._postgres is not None:
            await self._postgres.close()
        if self._admin is not None:
            await self._admin.execute(f'DROP DATABASE IF EXISTS "{self._postgres_name}" WITH (FORCE)')
            await self._admin.close()

    async def _new_sqlite(self) -> str:
        if self._sqlite_template is None:
            template = self._directory / "template.db"
            # Closing the only connection checkpoints the WAL into the file, so the file is complete.
            await (await SqlConversationStore.connect(f"sqlite+aiosqlite:///{template}")).aclose()
            self._sqlite_template = template
        path = self._directory / f"{uuid.uuid4().hex}.db"
        shutil.copyfile(self._sqlite_template, path)
        return f"sqlite+aiosqlite:///{path}"

    async def _emptied_postgres(self) -> str:
        if self._postgres is None:
            server_url = _postgres_server_url()
            self._admin = await _connect(server_url)
            await self._admin.execute(f'CREATE DATABASE "{self._postgres_name}"')
            self._postgres_url = _with_database(server_url, self._postgres_name)
            await (await SqlConversationStore.connect(self._postgres_url)).aclose()
            self._postgres = await _connect(self._postgres_url)
        # Read again each time: an app's setup creates its own tables (the shop's) after the first call,
        # and rows left in them would leak from one test into the next.
        self._emptying = await _deleting_every_row(self._postgres)
        await self._postgres.execute(self._emptying)
        return self._postgres_url


async def _deleting_every_row(connection: asyncpg.Connection) -> str:
    """SQL deleting every row but the schema version, referencing tables first so no foreign key objects."""
    rows = await connection.fetch(
        """
        SELECT child.relname AS child, parent.relname AS parent
        FROM pg_class child
        JOIN pg_namespace ON pg_namespace.oid = child.relnamespace
        LEFT JOIN pg_constraint fk ON fk.conrelid = child.oid AND fk.contype = 'f' AND fk.confrelid <> child.oid
        LEFT JOIN pg_class parent ON parent.oid = fk.confrelid
        WHERE pg_namespace.nspname = current_schema() AND child.relkind IN ('r', 'p')
            AND child.relname NOT LIKE '%alembic_version'
        """
    )
    referenced: dict[str, set[str]] = {}
    for row in rows:
        referenced.setdefault(row["child"], set())
        if row["parent"] is not None:
            referenced[row["child"]].add(row["parent"])
    order = reversed(list(TopologicalSorter(referenced).static_order()))
    return "; ".join(f'DELETE FROM "{table}"' for table in order)


_unreachable: list[str] = []
"""Why the PostgreSQL server could not be reached, once known, so later tests don't wait for it again."""


def _postgres_server_url() -> str:
    return os.environ.get(POSTGRES_URL_VARIABLE) or _unavailable(
        f"{POSTGRES_URL_VARIABLE} is not set; set it to a server the tests may create databases on, "
        "such as postgresql+asyncpg://postgres@127.0.0.1:5432/test"
    )


async def _connect(url: str) -> asyncpg.Connection:
    if _unreachable:
        _unavailable(_unreachable[0])
    try:
        return await asyncpg.connect(
            make_url(url).set(drivername="postgresql").render_as_string(False), timeout=5
        )
    except (OSError, asyncpg.PostgresError, TimeoutError) as error:
        _unreachable.append(f"PostgreSQL at {make_url(url)} is unreachable: {error!r}")
        _unavailable(_unreachable[0])


def _with_database(url: str, name: str) -> str:
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def _unavailable(reason: str) -> NoReturn:
    # CI must run the PostgreSQL tests: a missing server there is a broken pipeline, not a skip.
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


# -- the agent core on a test database ---------------------------------------------------------------


@pytest.fixture
async def core_factory(database_url: str) -> AsyncIterator[CoreFactory]:
    """Opens the core tests' own app (`core_app`) on one database: `await core_factory(script, ...)`.

    Each call is a fresh process's view (new engine, nothing cached); calls given the same script
    share its model, as processes share a provider.
    """
    async with AsyncExitStack() as stack:

        async def open_core(
            script: Script, /, *, options: RuntimeOptions | None = None, **app_options: Any
        ) -> App:
            opened = open_runtime(core_app(script, **app_options), database_url, options=options)
            return App(await stack.enter_async_context(opened))

        yield open_core


@pytest.fixture
async def app_factory(database_url: str) -> AsyncIterator[AppFactory]:
    """Opens the demo shop on one database: each call is a fresh process's view (new engine, nothing cached)."""
    async with AsyncExitStack() as stack:

        async def open_app() -> App:
            return App(await stack.enter_async_context(open_runtime(shop_app(delay=0), database_url)))

        yield open_app


@pytest.fixture
async def app(app_factory: AppFactory) -> App:
    return await app_factory()


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One real server on a fresh SQLite database for the test module; a module may define its own."""
    directory = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    with live_server(sqlite_url(directory), directory) as started:
        yield started


@pytest.fixture
async def client(server: LiveServer) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client for the module's `server`."""
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as opened:
        yield opened
