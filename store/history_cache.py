"""`HistoryCache`: validated histories kept in memory by their head entry, within a byte budget.

A conversation's history is the chain of entries ending at its record's head. Entries are
immutable and a new message always gets a new entry, so the history ending at an entry never
changes: the head entry alone identifies exactly what is stored, across every worker. A cached
history is therefore never stale; a conversation another worker extended simply has a new head,
and the store then reads only the entries after the head it has cached (`head_of`). A branch,
a regenerated turn or a fork is just another head: its history is another key.

Entries are held, not copied on each load: messages are treated as immutable once stored (the
store hands out a copy of a history's last message, the one pydantic-ai fills in when it continues
a history; see `SqlConversationStore`). A growing history is copied whole now and then, only so
that its messages lie together in memory (`CachedHistory.packed`). The budget counts each
history's stored message bytes times `OBJECT_FACTOR`, an estimate of what the validated objects
take in memory; the least recently used histories are evicted first.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

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
    "copied_every",
)

CACHE_ENV = "DURABLE_CHAT_HISTORY_CACHE_MB"
DEFAULT_CACHE_MB = 64
OBJECT_FACTOR = 3
"""Validated messages take about this many times their JSON size in memory (measured, rounded up:
see `docs/benchmarks.md`)."""
PACK_AFTER = 32
"""A load copies a history together again (`CachedHistory.packed`) once it added at least this many
entries since its last copy, and twice the square root of its length (`copied_every`)."""
_ENTRY_OVERHEAD = 200
"""Bytes counted per entry beyond its message: the entry, its ids and its slot in the tuple."""


def copied_every(length: int) -> int:
    """How many messages a history copied together at `length` messages adds before a load copies it
    again (`CachedHistory.packed`): 32 up to 256 messages, 62 at 1,000, 200 at 10,000.

    A copy costs in proportion to the length, once per this many messages; the messages added since
    the last copy cost every turn, far more than their share (`docs/benchmarks.md`, "Flat in
    history"). A square root balances the two: at 1,000 messages ~0.65 ms a turn for the copies.
    """
    return max(PACK_AFTER, 2 * math.isqrt(length))


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

    __slots__ = ("_decoded", "_packed", "_undecoded", "sizes")

    def __init__(
        self,
        entries: tuple[ConversationEntry, ...],
        sizes: tuple[int, ...],
        undecoded: tuple[Undecoded, ...] = (),
        packed: int | None = None,
    ) -> None:
        self._decoded, self.sizes, self._undecoded = entries, sizes, undecoded
        self._packed = len(entries) if packed is None else packed

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

    def packed(self) -> tuple[ConversationEntry, ...]:
        """Its entries (`entries`), copied together first once those added since its last copy number
        `copied_every` its length then.

        A history grown a turn at a time has its messages decoded a few at a time, scattered in
        memory among everything made meanwhile, and pydantic-ai walks a run's whole history several
        times per model request: over 1,000 scattered messages a turn took ~3 ms more than over the
        same messages made at once (`docs/benchmarks.md`, "Flat in history"). A copy made in one go
        lies together (a copy of 1,000 messages ~10 ms, once per 62 new ones).
        Messages are immutable once stored: the copies are equal, and loads hand out only them.
        """
        entries = self.entries
        if len(entries) - self._packed < copied_every(self._packed):
            return entries
        self._packed = len(entries)
        try:
            copied = [
                ConversationEntry(id=e.id, parent_id=e.parent_id, message=_copy(e.message)) for e in entries
            ]
        except RecursionError:  # a tool result nested deeper than Python recurses: left as it is
            return entries
        self._decoded = entries = tuple(copied)
        return entries

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
        return CachedHistory(self.entries + entries, self.sizes + sizes, packed=self._packed)

    def saved(self, batch: Undecoded, sizes: tuple[int, ...]) -> CachedHistory:
        """This history with the entries of a save after it, decoded when first read."""
        return CachedHistory(self._decoded, self.sizes + sizes, (*self._undecoded, batch), self._packed)

    def up_to(self, entry_id: str | None) -> CachedHistory | None:
        """The history ending at `entry_id` (empty for `None`), if `entry_id` is in this one."""
        if entry_id is None:
            return CachedHistory((), ())
        if entry_id == self.head_id:
            return self
        entries = self.entries
        for index in range(len(entries) - 1, -1, -1):
            if entries[index].id == entry_id:
                return CachedHistory(
                    entries[: index + 1], self.sizes[: index + 1], packed=min(self._packed, index + 1)
                )
        return None


_T = TypeVar("_T")
_new, _set = object.__new__, object.__setattr__
_COPIED: dict[type, bool] = {}
"""Per type: whether `_copy` copies its instances attribute by attribute (`_copied`)."""


def _copy(value: _T) -> _T:
    """A copy of a stored message's objects, made at once: its dataclasses, lists and dicts new, the
    rest (strings, numbers, times, bytes: immutable) shared.

    Each dataclass instance gets its attributes set in order, as its constructor sets them (CPython
    then keeps them inline, with no dictionary of their own); cheaper than a `pickle` round trip
    (about 8 against 10 ms for 1,000 messages).
    """
    kind: type[object] = type(value)
    if kind is list:
        return cast("_T", [_copy(item) for item in cast("list[object]", value)])
    if kind is dict:
        return cast("_T", {key: _copy(item) for key, item in cast("dict[object, object]", value).items()})
    copied = _COPIED.get(kind)
    if copied is None:
        copied = _COPIED[kind] = _copied(kind)
    if not copied:
        return value
    instance = _new(kind)
    attributes: dict[str, object] = vars(value)
    for name, item in attributes.items():
        _set(instance, name, _copy(item))
    return instance


def _copied(kind: type) -> bool:
    """Whether `_copy` copies instances of `kind` attribute by attribute: a dataclass whose instances
    keep every attribute in their `__dict__` (no slot holds one), none of its fields a descriptor of
    the class that setting it would call."""
    if not dataclasses.is_dataclass(kind) or not kind.__dictoffset__:
        return False
    for cls in kind.__mro__:
        slots = cls.__dict__.get("__slots__", ())
        if set([slots] if isinstance(slots, str) else slots) - {"__dict__", "__weakref__"}:
            return False
    defaults: list[object] = [getattr(kind, field.name, None) for field in dataclasses.fields(kind)]
    return not any(hasattr(type(default), "__set__") for default in defaults)


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
