"""Our `SqlConversationStore`, or pydantic-ai's in-memory store standing in while `store` doesn't import."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from pydantic_ai.conversation_store import ConversationStore, InMemoryConversationStore

from bench.systems import Location, PydanticStoreBackend

__all__ = ["Ours", "find_ours"]

SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
DEFAULT_PRAGMAS = {"journal_mode": "WAL", "synchronous": "NORMAL"}


@dataclass
class Ours:
    """How to open our store, and what it turned out to be."""

    stand_in_reason: str | None = None
    """Why pydantic-ai's in-memory store is measured in place of ours, or `None` when it is ours."""
    pragmas: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_PRAGMAS))
    """The SQLite journal settings our store runs with, for the floor to use the same."""

    @property
    def name(self) -> str:
        if self.stand_in_reason is None:
            return "ours: SqlConversationStore"
        return "ours (STAND-IN: InMemoryConversationStore)"

    async def connect(
        self, location: Location, *, history_cache_bytes: int | None = None
    ) -> ConversationStore:
        """Our store at `location`; `history_cache_bytes` as `SqlConversationStore` takes it (default: its own)."""
        if self.stand_in_reason is not None:
            return InMemoryConversationStore()
        from store import SqlConversationStore

        return await SqlConversationStore.connect(location.url, history_cache_bytes=history_cache_bytes)

    async def open(
        self, location: Location, *, history_cache_bytes: int | None = None, label: str = ""
    ) -> PydanticStoreBackend:
        """Our store at `location` as a benchmarked system, named `self.name` and `label`."""
        store = await self.connect(location, history_cache_bytes=history_cache_bytes)
        if location.dialect == "sqlite" and self.stand_in_reason is None:
            self.pragmas = await _sqlite_pragmas(store)
        return PydanticStoreBackend(f"{self.name}{label}", store)


async def _sqlite_pragmas(store: ConversationStore) -> dict[str, str]:
    engine = getattr(store, "engine", None)
    if engine is None:
        return dict(DEFAULT_PRAGMAS)
    async with engine.connect() as connection:
        journal = (await connection.exec_driver_sql("PRAGMA journal_mode")).scalar()
        synchronous = (await connection.exec_driver_sql("PRAGMA synchronous")).scalar()
    return {
        "journal_mode": str(journal).upper(),
        "synchronous": SYNCHRONOUS.get(synchronous, str(synchronous)),
    }


def find_ours() -> Ours:
    """Ours if `store` imports; otherwise the stand-in, with the reason."""
    try:
        importlib.import_module("store").SqlConversationStore  # noqa: B018 - only whether it imports
    except Exception as error:  # a half-written package can fail in any way, not only ImportError
        return Ours(stand_in_reason=f"`from store import SqlConversationStore` failed: {error!r}")
    return Ours()
