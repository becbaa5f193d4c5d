"""The floors: the same rows a store needs at the least, written with the bare driver.

`encode=False` stores message JSON made ahead of time and never parses what it reads: the cost of
the database alone. `encode=True` adds what any store of pydantic-ai messages must also do —
validate every loaded row back into messages and serialize the new ones — and is the fair floor
for our store.

On SQLite the fair floor is the stdlib's synchronous `sqlite3`, as the targets are set against.
An async store can't be that: `aiosqlite` runs each statement on a worker thread, and the hop
there and back costs more than a small query itself. `AiosqliteFloor` is the same fair floor
through `aiosqlite`, to tell that cost apart from our store's own.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Sequence

import aiosqlite
import asyncpg
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from sqlalchemy.engine import make_url

from bench.messages import message_json
from bench.systems import Backend, Location, Timing

__all__ = ["AiosqliteFloor", "AsyncpgFloor", "SqliteFloor", "asyncpg_dsn"]

_CREATE = (
    "CREATE TABLE messages (conversation_id TEXT NOT NULL, seq INTEGER NOT NULL, message {blob} NOT NULL, "
    "PRIMARY KEY (conversation_id, seq))"
)

Batch = list[bytes] | list[ModelMessage]


def _encode(batch: Batch) -> list[bytes]:
    return [item if isinstance(item, bytes) else message_json(item) for item in batch]


def _decode(rows: Sequence[bytes]) -> list[ModelMessage]:
    return ModelMessagesTypeAdapter.validate_json(b"[" + b",".join(rows) + b"]")


def asyncpg_dsn(url: str) -> str:
    """A SQLAlchemy `postgresql+asyncpg://` URL as the plain DSN asyncpg takes."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class SqliteFloor(Backend[Batch]):
    """Stdlib `sqlite3`, synchronous, one transaction per turn, with our store's journal settings."""

    def __init__(self, path: str, *, encode: bool, pragmas: dict[str, str]) -> None:
        super().__init__("sqlite3 + TypeAdapter (fair floor)" if encode else "sqlite3, raw JSON (floor)")
        self.encode = encode
        # Autocommit mode, so the `BEGIN`/`COMMIT` below are the only transaction boundaries.
        self.connection = sqlite3.connect(path, isolation_level=None)
        for name, value in pragmas.items():
            self.connection.execute(f"PRAGMA {name} = {value}")
        self.connection.execute(_CREATE.format(blob="BLOB"))

    def convert(self, messages: Sequence[ModelMessage]) -> Batch:
        return list(messages) if self.encode else [message_json(message) for message in messages]

    async def append(self, conversation_id: str, batch: Batch) -> Timing:
        started = time.perf_counter()
        rows = [
            row[0]
            for row in self.connection.execute(
                "SELECT message FROM messages WHERE conversation_id = ? ORDER BY seq", (conversation_id,)
            )
        ]
        if self.encode:
            _decode(rows)
        loaded = time.perf_counter()
        encoded = _encode(batch)
        self.connection.execute("BEGIN IMMEDIATE")
        self.connection.executemany(
            "INSERT INTO messages (conversation_id, seq, message) VALUES (?, ?, ?)",
            [(conversation_id, len(rows) + offset, data) for offset, data in enumerate(encoded)],
        )
        self.connection.execute("COMMIT")
        return Timing(load=loaded - started, save=time.perf_counter() - loaded)

    async def aclose(self) -> None:
        self.connection.close()


class AiosqliteFloor(Backend[list[ModelMessage]]):
    """The fair floor through `aiosqlite`: one connection, its transactions one at a time, as LangGraph's saver."""

    def __init__(self, connection: aiosqlite.Connection) -> None:
        super().__init__("aiosqlite + TypeAdapter (async floor)")
        self.connection = connection
        # Statements of concurrent turns may interleave on the one connection, transactions may not.
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: str, *, pragmas: dict[str, str]) -> AiosqliteFloor:
        connection = await aiosqlite.connect(path, isolation_level=None)
        for name, value in pragmas.items():
            await connection.execute(f"PRAGMA {name} = {value}")
        await connection.execute(_CREATE.format(blob="BLOB"))
        return cls(connection)

    def convert(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
        return list(messages)

    async def append(self, conversation_id: str, batch: list[ModelMessage]) -> Timing:
        started = time.perf_counter()
        async with self.connection.execute(
            "SELECT message FROM messages WHERE conversation_id = ? ORDER BY seq", (conversation_id,)
        ) as cursor:
            rows: list[bytes] = [row[0] for row in await cursor.fetchall()]
        _decode(rows)
        loaded = time.perf_counter()
        encoded = _encode(batch)
        async with self._lock:
            await self.connection.execute("BEGIN IMMEDIATE")
            await self.connection.executemany(
                "INSERT INTO messages (conversation_id, seq, message) VALUES (?, ?, ?)",
                [(conversation_id, len(rows) + offset, data) for offset, data in enumerate(encoded)],
            )
            await self.connection.execute("COMMIT")
        return Timing(load=loaded - started, save=time.perf_counter() - loaded)

    async def aclose(self) -> None:
        await self.connection.close()


class AsyncpgFloor(Backend[Batch]):
    """Bare asyncpg with a pool, one transaction per turn."""

    def __init__(self, pool: asyncpg.Pool, *, encode: bool) -> None:
        super().__init__("asyncpg + TypeAdapter (fair floor)" if encode else "asyncpg, raw JSON (floor)")
        self.pool = pool
        self.encode = encode

    @classmethod
    async def open(cls, location: Location, *, encode: bool) -> AsyncpgFloor:
        pool = await asyncpg.create_pool(asyncpg_dsn(location.url), min_size=1, max_size=10)
        await pool.execute(_CREATE.format(blob="BYTEA"))
        return cls(pool, encode=encode)

    def convert(self, messages: Sequence[ModelMessage]) -> Batch:
        return list(messages) if self.encode else [message_json(message) for message in messages]

    async def append(self, conversation_id: str, batch: Batch) -> Timing:
        started = time.perf_counter()
        async with self.pool.acquire() as connection:
            records = await connection.fetch(
                "SELECT message FROM messages WHERE conversation_id = $1 ORDER BY seq", conversation_id
            )
        rows: list[bytes] = [record[0] for record in records]
        if self.encode:
            _decode(rows)
        loaded = time.perf_counter()
        encoded = _encode(batch)
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.executemany(
                "INSERT INTO messages (conversation_id, seq, message) VALUES ($1, $2, $3)",
                [(conversation_id, len(rows) + offset, data) for offset, data in enumerate(encoded)],
            )
        return Timing(load=loaded - started, save=time.perf_counter() - loaded)

    async def aclose(self) -> None:
        await self.pool.close()
