"""What the benchmark drives: one storage system, fed turns by key, timed per load and save.

Every system converts the pydantic-ai messages to its own form in `prepare`, outside the timed
part, so a turn's timing holds only what that system does to load and store a history.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationStore, InMemoryConversationStore
from pydantic_ai.messages import ModelMessage

__all__ = ["Backend", "Location", "PydanticStoreBackend", "System", "Timing"]

Dialect = Literal["sqlite", "postgresql", "memory"]
Batch = TypeVar("Batch")


@dataclass(frozen=True)
class Location:
    """Where a system keeps its data: a fresh SQLite file or a fresh PostgreSQL database."""

    dialect: Dialect
    url: str
    """A SQLAlchemy URL with the async driver (`sqlite+aiosqlite:///…`, `postgresql+asyncpg://…`)."""
    path: str | None = None
    """The SQLite file, for drivers that take a path rather than a URL."""


@dataclass(frozen=True)
class Timing:
    """One turn's cost in seconds: reading the history, then storing the new messages."""

    load: float
    save: float

    @property
    def total(self) -> float:
        return self.load + self.save


class System(Protocol):
    """A storage system as the workloads see it; turns are referred to by the key they were prepared under."""

    name: str

    def prepare(self, key: str, messages: Sequence[ModelMessage]) -> None: ...

    async def prefill(self, conversation_id: str, key: str) -> None: ...

    async def turn(self, conversation_id: str, key: str) -> Timing: ...

    async def aclose(self) -> None: ...


class Backend(ABC, Generic[Batch]):
    """A `System` that keeps each prepared batch in its own form until a turn uses it."""

    name: str

    def __init__(self, name: str) -> None:
        self.name = name
        self._batches: dict[str, Batch] = {}

    def prepare(self, key: str, messages: Sequence[ModelMessage]) -> None:
        if key not in self._batches:
            self._batches[key] = self.convert(messages)

    async def prefill(self, conversation_id: str, key: str) -> None:
        await self.append(conversation_id, self._batches[key])

    async def turn(self, conversation_id: str, key: str) -> Timing:
        return await self.append(conversation_id, self._batches[key])

    @abstractmethod
    def convert(self, messages: Sequence[ModelMessage]) -> Batch:
        """The messages in the form this system stores."""

    @abstractmethod
    async def append(self, conversation_id: str, batch: Batch) -> Timing:
        """Load the conversation's whole history, then store `batch` after it."""

    async def aclose(self) -> None:
        return None


class PydanticStoreBackend(Backend[list[ModelMessage]]):
    """Any pydantic-ai `ConversationStore`: ours, or the in-memory one."""

    def __init__(self, name: str, store: ConversationStore) -> None:
        super().__init__(name)
        self.store = store

    @classmethod
    def in_memory(cls) -> PydanticStoreBackend:
        return cls("pydantic-ai InMemoryConversationStore", InMemoryConversationStore())

    def convert(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
        return list(messages)

    async def append(self, conversation_id: str, batch: list[ModelMessage]) -> Timing:
        started = time.perf_counter()
        conversation = await self.store.load(conversation_id) or Conversation(conversation_id=conversation_id)
        loaded = time.perf_counter()
        conversation.messages.extend(batch)
        await self.store.save(conversation)
        return Timing(load=loaded - started, save=time.perf_counter() - loaded)

    async def aclose(self) -> None:
        close = getattr(self.store, "aclose", None)
        if close is not None:
            await close()
