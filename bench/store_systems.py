"""What the store benchmark drives: one storage system, fed turns by key, timed per load and save.

Each converts the messages to its own form in `prepare`, outside the timed part. The floors write the
rows a store needs at the least with the bare driver: *raw* parses nothing, *fair* validates and
serializes the messages as any store must, *async* is the fair one through aiosqlite.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiosqlite
import asyncpg  # pyright: ignore[reportMissingTypeStubs]
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationStore, InMemoryConversationStore
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from sqlalchemy.engine import make_url

from bench.harness.databases import Dialect, asyncpg_dsn
from bench.store_messages import message_json
from store import SqlConversationStore

Rows = list[tuple[str, int, bytes]]
_CREATE = (
    "CREATE TABLE messages (conversation_id TEXT NOT NULL, seq INTEGER NOT NULL, message {blob} NOT NULL, "
    "PRIMARY KEY (conversation_id, seq))"
)
_SELECT = "SELECT message FROM messages WHERE conversation_id = ? ORDER BY seq"
_INSERT = "INSERT INTO messages (conversation_id, seq, message) VALUES (?, ?, ?)"
_SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
WARM_CACHE_BYTES = 1 << 30
"""The history cache of `warm`: room for every history of a full run (~75 MB charged at 22 rounds)."""


@dataclass(frozen=True)
class Timing:
    """One turn's cost in seconds: reading the history, then storing the new messages."""

    load: float
    save: float

    @property
    def total(self) -> float:
        return self.load + self.save


class Backend:
    """A system that keeps each prepared batch in its own form (`convert`) until a turn uses it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._batches: dict[str, Any] = {}

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

    def convert(self, messages: Sequence[ModelMessage]) -> Any:
        return list(messages)

    async def load(self, conversation_id: str) -> Any:
        raise NotImplementedError

    async def save(self, conversation_id: str, loaded: Any, batch: Any) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None


class PydanticStoreBackend(Backend):
    """Any pydantic-ai `ConversationStore`: ours, or the in-memory one."""

    def __init__(self, name: str, store: ConversationStore) -> None:
        super().__init__(name)
        self.store = store

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

    async def open(self, url: str, *, history_cache_bytes: int, label: str) -> PydanticStoreBackend:
        store = await SqlConversationStore.connect(url, history_cache_bytes=history_cache_bytes)
        if url.startswith("sqlite"):
            async with store.engine.connect() as connection:
                journal = (await connection.exec_driver_sql("PRAGMA journal_mode")).scalar()
                synchronous = (await connection.exec_driver_sql("PRAGMA synchronous")).scalar()
            self.pragmas = {
                "journal_mode": str(journal).upper(),
                "synchronous": _SYNCHRONOUS.get(int(synchronous or 0), str(synchronous)),
            }
        return PydanticStoreBackend(f"ours: SqlConversationStore{label}", store)

    def setup(self) -> list[str]:
        """The statements that make a SQLite floor's table, with ours' journal settings."""
        return [
            *(f"PRAGMA {name} = {value}" for name, value in self.pragmas.items()),
            _CREATE.format(blob="BLOB"),
        ]


class Floor(Backend):
    """The rows a store needs at the least, with a bare driver: `fetch` a conversation's rows, `insert`
    a turn's in one transaction. `encode` also decodes every loaded row with `ModelMessagesTypeAdapter`
    and encodes the new ones (the fair floor); else raw JSON."""

    def __init__(
        self,
        driver: str,
        fetch: Callable[[str], Awaitable[list[bytes]]],
        insert: Callable[[Rows], Awaitable[None]],
        close: Callable[[], Awaitable[object]],
        *,
        encode: bool,
        floor: str = "fair floor",
    ) -> None:
        super().__init__(f"{driver} + TypeAdapter ({floor})" if encode else f"{driver}, raw JSON (floor)")
        self.fetch, self.insert, self.close, self.encode = fetch, insert, close, encode

    def convert(self, messages: Sequence[ModelMessage]) -> list[bytes] | list[ModelMessage]:
        return list(messages) if self.encode else [message_json(message) for message in messages]

    async def load(self, conversation_id: str) -> int:
        """How many rows are stored, after decoding them when the floor encodes."""
        rows = await self.fetch(conversation_id)
        if self.encode:
            ModelMessagesTypeAdapter.validate_json(b"[" + b",".join(rows) + b"]")
        return len(rows)

    async def save(self, conversation_id: str, loaded: int, batch: list[bytes] | list[ModelMessage]) -> None:
        encoded = [item if isinstance(item, bytes) else message_json(item) for item in batch]
        await self.insert([(conversation_id, loaded + offset, data) for offset, data in enumerate(encoded)])

    async def aclose(self) -> None:
        await self.close()


async def sqlite_floor(url: str, ours: Ours, *, encode: bool) -> Floor:
    """Stdlib `sqlite3`, synchronous, one transaction per turn, with our store's journal settings."""
    # Autocommit mode, so the `BEGIN`/`COMMIT` below are the only transaction boundaries.
    connection = sqlite3.connect(make_url(url).database or "", isolation_level=None)
    for statement in ours.setup():
        connection.execute(statement)

    async def fetch(conversation_id: str) -> list[bytes]:
        return [row[0] for row in connection.execute(_SELECT, (conversation_id,))]

    async def insert(rows: Rows) -> None:
        connection.execute("BEGIN IMMEDIATE")
        connection.executemany(_INSERT, rows)
        connection.execute("COMMIT")

    async def close() -> None:
        connection.close()

    return Floor("sqlite3", fetch, insert, close, encode=encode)


async def aiosqlite_floor(url: str, ours: Ours) -> Floor:
    """The fair floor through `aiosqlite`: one connection, one transaction per turn."""
    connection = await aiosqlite.connect(make_url(url).database or "", isolation_level=None)
    for statement in ours.setup():
        await connection.execute(statement)

    async def fetch(conversation_id: str) -> list[bytes]:
        async with connection.execute(_SELECT, (conversation_id,)) as cursor:
            return [row[0] for row in await cursor.fetchall()]

    async def insert(rows: Rows) -> None:
        await connection.execute("BEGIN IMMEDIATE")
        await connection.executemany(_INSERT, rows)
        await connection.execute("COMMIT")

    return Floor("aiosqlite", fetch, insert, connection.close, encode=True, floor="async floor")


async def asyncpg_floor(url: str, *, encode: bool) -> Floor:
    """Bare asyncpg with a pool, one transaction per turn."""
    pool: Any = await asyncpg.create_pool(asyncpg_dsn(url), min_size=1, max_size=10)  # pyright: ignore[reportUnknownMemberType]
    await pool.execute(_CREATE.format(blob="BYTEA"))

    async def fetch(conversation_id: str) -> list[bytes]:
        async with pool.acquire() as connection:
            return [r[0] for r in await connection.fetch(_SELECT.replace("?", "$1"), conversation_id)]

    async def insert(rows: Rows) -> None:
        async with pool.acquire() as connection, connection.transaction():
            await connection.executemany(_INSERT.replace("?, ?, ?", "$1, $2, $3"), rows)

    return Floor("asyncpg", fetch, insert, pool.close, encode=encode)


@dataclass(frozen=True)
class Contender:
    key: str
    """A short, stable name: `ours`, `warm`, `floor`, `fair`, `async`, `memory`."""
    open: Callable[[str], Awaitable[Backend]]
    """Opens the system on a fresh database's URL."""


def contenders(ours: Ours, dialect: Dialect) -> list[Contender]:
    """Every system measured on `dialect`, ours first, as the SQLite floors copy its journal settings.
    Ours twice: `ours` with no history cache, judged (the floors' work); `warm` with every history
    cached, reported (`docs/benchmarks.md`, the store's method)."""

    async def memory(url: str) -> Backend:
        return PydanticStoreBackend("pydantic-ai InMemoryConversationStore", InMemoryConversationStore())

    found = [
        Contender("ours", lambda url: ours.open(url, history_cache_bytes=0, label=", no history cache")),
        Contender(
            "warm", lambda url: ours.open(url, history_cache_bytes=WARM_CACHE_BYTES, label=", history cached")
        ),
    ]
    if dialect == "PostgreSQL":
        return [
            *found,
            Contender("floor", lambda url: asyncpg_floor(url, encode=False)),
            Contender("fair", lambda url: asyncpg_floor(url, encode=True)),
        ]
    return [
        *found,
        Contender("floor", lambda url: sqlite_floor(url, ours, encode=False)),
        Contender("fair", lambda url: sqlite_floor(url, ours, encode=True)),
        Contender("async", lambda url: aiosqlite_floor(url, ours)),
        Contender("memory", memory),
    ]
