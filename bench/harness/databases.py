"""Scratch databases: a fresh SQLite file or PostgreSQL database per use, dropped after it.

PostgreSQL comes from a server URL (`postgresql+asyncpg://user@host/db`): each scratch database is
created on that server under a name of its own and dropped (`WITH (FORCE)`) when done.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool

from agent.demo import shop_app
from store import Database

Dialect = Literal["SQLite", "PostgreSQL"]


def asyncpg_dsn(url: str) -> str:
    """A SQLAlchemy `postgresql+asyncpg://` URL as the plain DSN asyncpg takes."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@asynccontextmanager
async def connected(url: str) -> AsyncGenerator[AsyncConnection]:
    """One connection to the database at `url`, in autocommit, closed afterwards."""
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            yield connection
    finally:
        await engine.dispose()


@asynccontextmanager
async def postgres_database(server: str) -> AsyncGenerator[str]:
    """A new database on the server at `server`, dropped afterwards: its URL."""
    name = f"bench_{uuid.uuid4().hex[:12]}"
    async with connected(server) as admin:
        await admin.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        async with connected(server) as admin:
            await admin.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@asynccontextmanager
async def scratch_database(
    database: Dialect, folder: Path, name: str, postgres: str | None = None
) -> AsyncGenerator[str]:
    """A fresh database's URL: the SQLite file `folder/name.db`, or a database on `postgres`'s server."""
    if database == "PostgreSQL":
        if postgres is None:
            raise ValueError("a PostgreSQL scratch database needs a server URL")
        async with postgres_database(postgres) as url:
            yield url
    else:
        yield f"sqlite+aiosqlite:///{folder / f'{name}.db'}"


async def postgres_version(url: str) -> str:
    """The server's version, as `SHOW server_version` says it (`15.20 (Debian …)`)."""
    async with connected(url) as connection:
        return str(await connection.scalar(sa.text("SHOW server_version")))


async def available(
    postgres: str | None, notes: list[str], *, quick: bool = False
) -> tuple[list[Dialect], str | None]:
    """SQLite, and PostgreSQL when `postgres` names a server that answers (with its version) and not `quick`.

    Why PostgreSQL is not measured, when it is not, is added to `notes` and printed.
    """
    if quick:
        notes.append("PostgreSQL not measured: a --quick run")
        return ["SQLite"], None
    if not postgres:
        notes.append("PostgreSQL not measured: pass --postgres URL or set $DURABLE_CHAT_TEST_POSTGRES_URL")
        return ["SQLite"], None
    try:
        return ["SQLite", "PostgreSQL"], await postgres_version(postgres)
    except (OSError, SQLAlchemyError) as error:
        where = make_url(postgres).render_as_string(hide_password=True)
        print(f"PostgreSQL skipped: {where!r}: {error!r}", flush=True)
        notes.append(f"PostgreSQL not measured: {error!r}")
        return ["SQLite"], None


async def prepare_shop(url: str) -> None:
    """Our schema and the demo shop's tables and data, as `durable-chat serve` makes them at start."""
    async with await Database.connect(url) as db:
        await shop_app(delay=0).start(db.engine)


async def statements(run: Callable[[], Awaitable[object]]) -> list[tuple[str, Any]]:
    """The statements `run` sends through any engine, with their parameters, in order."""
    sent: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        sent.append((statement, parameters))

    event.listen(sa.Engine, "before_cursor_execute", capture)
    try:
        await run()
    finally:
        event.remove(sa.Engine, "before_cursor_execute", capture)
    return sent


async def explain(url: str, statement: str, parameters: Any) -> str:
    """PostgreSQL's plan (`EXPLAIN`) of `statement` as it was sent."""
    async with connected(url) as connection:
        rows = await connection.exec_driver_sql("EXPLAIN " + statement, parameters)
        return "\n".join(row[0] for row in rows)
