"""`HistoryCache`: validated histories kept in memory by their head entry, within a byte budget.

A conversation's history is the chain of entries ending at its record's head. Entries are
immutable and a new message always gets a new entry, so the history ending at an entry never
changes: the head entry alone identifies exactly what is stored, across every worker. A cached
history is therefore never stale; a conversation another worker extended simply has a new head,
and the store then reads only the entries after the head it has cached (`head_of`). A branch,
a regenerated turn or a fork is just another head: its history is another key.

Entries are held, not copied: messages are treated as immutable once stored (the store hands
out a copy of a history's last message, the one pydantic-ai fills in when it continues a
history; see `SqlConversationStore`). The budget counts each history's stored message bytes
times `OBJECT_FACTOR`, an estimate of what the validated objects take in memory; the least
recently used histories are evicted first.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic_ai.conversation_store import ConversationEntry
from pydantic_ai.messages import ModelMessage

__all__ = (
    "CACHE_ENV",
    "DEFAULT_CACHE_MB",
    "OBJECT_FACTOR",
    "CachedHistory",
    "HistoryCache",
    "Undecoded",
    "budget_from_env",
)

CACHE_ENV = "DURABLE_CHAT_HISTORY_CACHE_MB"
DEFAULT_CACHE_MB = 64
OBJECT_FACTOR = 3
"""Validated messages take about this many times their JSON size in memory (measured, rounded up:
see `docs/benchmarks.md`)."""
_ENTRY_OVERHEAD = 200
"""Bytes counted per entry beyond its message: the entry, its ids and its slot in the tuple."""


def budget_from_env() -> int:
    """The budget in bytes that `DURABLE_CHAT_HISTORY_CACHE_MB` sets (64 MB by default, 0 disables).

    Raises:
        ValueError: The setting is not a non-negative number.
    """
    raw = os.environ.get(CACHE_ENV, "").strip()
    try:
        megabytes = float(raw) if raw else float(DEFAULT_CACHE_MB)
    except ValueError:
        megabytes = -1.0
    if not megabytes >= 0:  # also NaN
        raise ValueError(f"{CACHE_ENV} must be a number of megabytes, 0 or more; got {raw!r}")
    return int(megabytes * 1024 * 1024)


@dataclass(frozen=True, slots=True)
class Undecoded:
    """Entries a save stored here, kept as their bytes until a load reads them (`CachedHistory.entries`)."""

    ids: tuple[tuple[str, str | None], ...]
    """Each entry's id and its parent's, oldest first."""
    decode: Callable[[], Sequence[ModelMessage]]
    """Their messages, as a load from the database would validate them."""


class CachedHistory:
    """A whole history, oldest entry first, and the stored bytes of each of its messages.

    The entries a save adds are decoded when the history is first read (`entries`), not as they are
    saved: a history no load reads again (a thread's last turn, a delegated run's conversation) is
    never decoded, and the saves of one run add to it without reading it."""

    __slots__ = ("_decoded", "_undecoded", "sizes")

    def __init__(
        self,
        entries: tuple[ConversationEntry, ...],
        sizes: tuple[int, ...],
        undecoded: tuple[Undecoded, ...] = (),
    ) -> None:
        self._decoded, self.sizes, self._undecoded = entries, sizes, undecoded

    @property
    def entries(self) -> tuple[ConversationEntry, ...]:
        """Its entries, the saved ones decoded now if not yet.

        Raises:
            CorruptData: A saved message does not validate, as a load of it from the database would say.
        """
        if self._undecoded:
            added = tuple(
                ConversationEntry(id=entry_id, parent_id=parent_id, message=message)
                for batch in self._undecoded
                for (entry_id, parent_id), message in zip(batch.ids, batch.decode(), strict=True)
            )
            self._decoded, self._undecoded = self._decoded + added, ()
        return self._decoded

    @property
    def head_id(self) -> str | None:
        if self._undecoded:
            return self._undecoded[-1].ids[-1][0]
        return self._decoded[-1].id if self._decoded else None

    @property
    def charge(self) -> int:
        """What this history counts against the budget."""
        return sum(self.sizes) * OBJECT_FACTOR + len(self.sizes) * _ENTRY_OVERHEAD

    def extended(self, entries: tuple[ConversationEntry, ...], sizes: tuple[int, ...]) -> CachedHistory:
        return CachedHistory(self.entries + entries, self.sizes + sizes)

    def saved(self, batch: Undecoded, sizes: tuple[int, ...]) -> CachedHistory:
        """This history with the entries of a save after it, decoded when first read."""
        return CachedHistory(self._decoded, self.sizes + sizes, (*self._undecoded, batch))

    def up_to(self, entry_id: str | None) -> CachedHistory | None:
        """The history ending at `entry_id` (empty for `None`), if `entry_id` is in this one."""
        if entry_id is None:
            return CachedHistory((), ())
        if entry_id == self.head_id:
            return self
        entries = self.entries
        for index in range(len(entries) - 1, -1, -1):
            if entries[index].id == entry_id:
                return CachedHistory(entries[: index + 1], self.sizes[: index + 1])
        return None


class HistoryCache:
    """Histories by head entry, least recently used evicted first once their charges pass `budget` bytes."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self._histories: OrderedDict[str, CachedHistory] = OrderedDict()
        # The head last cached per conversation: where reading the entries a newer head adds stops.
        self._heads: dict[str, str] = {}

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    def __len__(self) -> int:
        return len(self._histories)

    def get(self, head_id: str) -> CachedHistory | None:
        found = self._histories.get(head_id)
        if found is not None:
            self._histories.move_to_end(head_id)
        return found

    def head_of(self, conversation_id: str) -> CachedHistory | None:
        """The history last cached for `conversation_id`, if it is still cached."""
        head_id = self._heads.get(conversation_id)
        return None if head_id is None else self._histories.get(head_id)

    def put(self, conversation_id: str | None, history: CachedHistory) -> None:
        """Cache `history`, as `conversation_id`'s latest unless `None`; the one it had before is dropped."""
        head_id = history.head_id
        if head_id is None or not self.enabled:
            return
        previous = None if conversation_id is None else self._heads.get(conversation_id)
        if previous is not None and previous != head_id:
            self._discard(previous)
        charge = history.charge
        if charge > self.budget:
            if conversation_id is not None:
                self._heads.pop(conversation_id, None)
            return
        self._discard(head_id)
        self._histories[head_id] = history
        self.used += charge
        if conversation_id is not None:
            self._heads[conversation_id] = head_id
        while self.used > self.budget:
            _, evicted = self._histories.popitem(last=False)
            self.used -= evicted.charge
        if len(self._heads) > 4 * len(self._histories) + 64:
            self._heads = {
                conversation: head for conversation, head in self._heads.items() if head in self._histories
            }

    def forget(self, conversation_id: str) -> None:
        """Drop what is cached for `conversation_id` (it was deleted)."""
        head_id = self._heads.pop(conversation_id, None)
        if head_id is not None:
            self._discard(head_id)

    def _discard(self, head_id: str) -> None:
        found = self._histories.pop(head_id, None)
        if found is not None:
            self.used -= found.charge
