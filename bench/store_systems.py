"""What the store benchmark drives: one storage system, fed turns by key, timed per load and save.

Each converts the messages to its own form in `prepare`, outside the timed part. The floors write the
rows a store needs at the least with the bare driver: *raw* parses nothing, *fair* validates and
serializes the messages as any store must, *async* is the fair one through aiosqlite.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import aiosqlite
import asyncpg  # pyright: ignore[reportMissingTypeStubs]
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationStore, InMemoryConversationStore
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from sqlalchemy.engine import make_url

from bench.harness.databases import asyncpg_dsn
from bench.store_messages import message_json
from store import SqlConversationStore

__all__ = (
    "AiosqliteFloor",
    "AsyncpgFloor",
    "Backend",
    "Ours",
    "PydanticStoreBackend",
    "SqliteFloor",
    "Timing",
    "sqlite_path",
)

Batch = TypeVar("Batch")
Loaded = TypeVar("Loaded")
_CREATE = (
    "CREATE TABLE messages (conversation_id TEXT NOT NULL, seq INTEGER NOT NULL, message {blob} NOT NULL, "
    "PRIMARY KEY (conversation_id, seq))"
)
_SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def sqlite_path(url: str) -> str | None:
    """The file of a SQLite URL; `None` for another database."""
    parsed = make_url(url)
    return parsed.database if parsed.get_backend_name() == "sqlite" else None


@dataclass(frozen=True)
class Timing:
    """One turn's cost in seconds: reading the history, then storing the new messages."""

    load: float
    save: float

    @property
    def total(self) -> float:
        return self.load + self.save


class Backend(ABC, Generic[Batch, Loaded]):
    """A system that keeps each prepared batch in its own form until a turn uses it.

    A turn is `load` (the whole history, and whatever the save needs of it) then `save`, each timed.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._batches: dict[str, Batch] = {}

    def prepare(self, key: str, messages: Sequence[ModelMessage]) -> None:
        if key not in self._batches:
            self._batches[key] = self.convert(messages)

    async def turn(self, conversation_id: str, key: str) -> Timing:
        """Load the conversation's whole history, then store the batch prepared under `key` after it."""
        started = time.perf_counter()
        loaded = await self.load(conversation_id)
        middle = time.perf_counter()
        await self.save(conversation_id, loaded, self._batches[key])
        return Timing(load=middle - started, save=time.perf_counter() - middle)

    @abstractmethod
    def convert(self, messages: Sequence[ModelMessage]) -> Batch: ...

    @abstractmethod
    async def load(self, conversation_id: str) -> Loaded: ...

    @abstractmethod
    async def save(self, conversation_id: str, loaded: Loaded, batch: Batch) -> None: ...

    async def aclose(self) -> None:
        return None


System = Backend[Any, Any]


class PydanticStoreBackend(Backend[list[ModelMessage], Conversation]):
    """Any pydantic-ai `ConversationStore`: ours, or the in-memory one."""

    def __init__(self, name: str, store: ConversationStore) -> None:
        super().__init__(name)
        self.store = store

    @classmethod
    def in_memory(cls) -> PydanticStoreBackend:
        return cls("pydantic-ai InMemoryConversationStore", InMemoryConversationStore())

    def convert(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
        return list(messages)

    async def load(self, conversation_id: str) -> Conversation:
        return await self.store.load(conversation_id) or Conversation(conversation_id=conversation_id)

    async def save(self, conversation_id: str, loaded: Conversation, batch: list[ModelMessage]) -> None:
        loaded.messages.extend(batch)
        await self.store.save(loaded)

    async def aclose(self) -> None:
        if isinstance(self.store, SqlConversationStore):
            await self.store.aclose()


class Ours:
    """Opens our store, and remembers the SQLite journal settings it runs with, for the floors to use the same."""

    def __init__(self) -> None:
        self.pragmas = {"journal_mode": "WAL", "synchronous": "NORMAL"}

    async def open(
        self, url: str, *, history_cache_bytes: int | None = None, label: str = ""
    ) -> PydanticStoreBackend:
        store = await SqlConversationStore.connect(url, history_cache_bytes=history_cache_bytes)
        if sqlite_path(url) is not None:
            async with store.engine.connect() as connection:
                journal = (await connection.exec_driver_sql("PRAGMA journal_mode")).scalar()
                synchronous = (await connection.exec_driver_sql("PRAGMA synchronous")).scalar()
            self.pragmas = {
                "journal_mode": str(journal).upper(),
                "synchronous": _SYNCHRONOUS.get(int(synchronous or 0), str(synchronous)),
            }
        return PydanticStoreBackend(f"ours: SqlConversationStore{label}", store)


FloorBatch = list[bytes] | list[ModelMessage]
_SELECT = "SELECT message FROM messages WHERE conversation_id = ? ORDER BY seq"
_INSERT = "INSERT INTO messages (conversation_id, seq, message) VALUES (?, ?, ?)"


def _rows(conversation_id: str, stored: int, batch: FloorBatch) -> list[tuple[str, int, bytes]]:
    """The batch's rows after the `stored` ones, each message encoded unless it came as JSON."""
    encoded = [item if isinstance(item, bytes) else message_json(item) for item in batch]
    return [(conversation_id, stored + offset, data) for offset, data in enumerate(encoded)]


class Floor(Backend[FloorBatch, int]):
    """The rows a store needs at the least, with a bare driver: `encode` also decodes every loaded
    row with `ModelMessagesTypeAdapter` and encodes the new ones (the fair floor); else raw JSON."""

    def __init__(self, name: str, *, encode: bool, floor: str = "fair floor") -> None:
        super().__init__(f"{name} + TypeAdapter ({floor})" if encode else f"{name}, raw JSON (floor)")
        self.encode = encode

    def convert(self, messages: Sequence[ModelMessage]) -> FloorBatch:
        return list(messages) if self.encode else [message_json(message) for message in messages]

    def decoded(self, rows: Sequence[bytes]) -> int:
        """How many rows are stored, after decoding them when the floor encodes."""
        if self.encode:
            ModelMessagesTypeAdapter.validate_json(b"[" + b",".join(rows) + b"]")
        return len(rows)


class SqliteFloor(Floor):
    """Stdlib `sqlite3`, synchronous, one transaction per turn, with our store's journal settings."""

    def __init__(self, url: str, *, encode: bool, pragmas: dict[str, str]) -> None:
        super().__init__("sqlite3", encode=encode)
        # Autocommit mode, so the `BEGIN`/`COMMIT` below are the only transaction boundaries.
        self.connection = sqlite3.connect(sqlite_path(url) or "", isolation_level=None)
        for name, value in pragmas.items():
            self.connection.execute(f"PRAGMA {name} = {value}")
        self.connection.execute(_CREATE.format(blob="BLOB"))

    async def load(self, conversation_id: str) -> int:
        return self.decoded([row[0] for row in self.connection.execute(_SELECT, (conversation_id,))])

    async def save(self, conversation_id: str, loaded: int, batch: FloorBatch) -> None:
        rows = _rows(conversation_id, loaded, batch)
        self.connection.execute("BEGIN IMMEDIATE")
        self.connection.executemany(_INSERT, rows)
        self.connection.execute("COMMIT")

    async def aclose(self) -> None:
        self.connection.close()


class AiosqliteFloor(Floor):
    """The fair floor through `aiosqlite`: one connection, its transactions one at a time, as LangGraph's saver."""

    def __init__(self, connection: aiosqlite.Connection) -> None:
        super().__init__("aiosqlite", encode=True, floor="async floor")
        self.connection = connection
        self._lock = asyncio.Lock()  # statements of concurrent turns may interleave, transactions may not

    @classmethod
    async def open(cls, url: str, *, pragmas: dict[str, str]) -> AiosqliteFloor:
        connection = await aiosqlite.connect(sqlite_path(url) or "", isolation_level=None)
        for name, value in pragmas.items():
            await connection.execute(f"PRAGMA {name} = {value}")
        await connection.execute(_CREATE.format(blob="BLOB"))
        return cls(connection)

    async def load(self, conversation_id: str) -> int:
        async with self.connection.execute(_SELECT, (conversation_id,)) as cursor:
            rows: list[bytes] = [row[0] for row in await cursor.fetchall()]
        return self.decoded(rows)

    async def save(self, conversation_id: str, loaded: int, batch: FloorBatch) -> None:
        rows = _rows(conversation_id, loaded, batch)
        async with self._lock:
            await self.connection.execute("BEGIN IMMEDIATE")
            await self.connection.executemany(_INSERT, rows)
            await self.connection.execute("COMMIT")

    async def aclose(self) -> None:
        await self.connection.close()


class AsyncpgFloor(Floor):
    """Bare asyncpg with a pool, one transaction per turn."""

    def __init__(self, pool: Any, *, encode: bool) -> None:
        super().__init__("asyncpg", encode=encode)
        self.pool = pool

    @classmethod
    async def open(cls, url: str, *, encode: bool) -> AsyncpgFloor:
        pool: Any = await asyncpg.create_pool(asyncpg_dsn(url), min_size=1, max_size=10)  # pyright: ignore[reportUnknownMemberType]
        await pool.execute(_CREATE.format(blob="BYTEA"))
        return cls(pool, encode=encode)

    async def load(self, conversation_id: str) -> int:
        async with self.pool.acquire() as connection:
            query = "SELECT message FROM messages WHERE conversation_id = $1 ORDER BY seq"
            rows: list[bytes] = [record[0] for record in await connection.fetch(query, conversation_id)]
        return self.decoded(rows)

    async def save(self, conversation_id: str, loaded: int, batch: FloorBatch) -> None:
        rows = _rows(conversation_id, loaded, batch)
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.executemany(
                "INSERT INTO messages (conversation_id, seq, message) VALUES ($1, $2, $3)", rows
            )

    async def aclose(self) -> None:
        await self.pool.close()
