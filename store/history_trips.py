"""What a load's and a save's trip carry: the compiled statements and their values, for a dialect's module to run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy.engine import Dialect

from .checkpoints import Checkpoint
from .compiled import Compiled

__all__ = ("HeadRead", "NewEntry", "RecordSave", "RecordWrite")

NewEntry = tuple[str, str | None, str, bytes, str | None]
"""A new entry's row: its id, its parent's, its message's kind, its stored bytes and the digest of
the instructions they name (`store.instructions`)."""


RecordWrite = Literal["update", "insert_root", "insert_fork"]
"""How a save writes its record: over the revision it read, as a new conversation, or as a fork."""


@dataclass(frozen=True, kw_only=True)
class HeadRead:
    """A load's trip: the record's row and, unless cached, the rows of its history."""

    record: Compiled
    history: Compiled
    record_parameters: tuple[Any, ...]
    history_parameters: list[Any] | None
    """The history's parameters, its head filled in from the record; `None`: the history is not read."""
    head_slot: int
    """Where the head goes in `history_parameters`."""
    record_head: int
    """Where the head is in the record's row."""
    skip: object
    """The cached head as the database driver gives it back (SQLite): its history is not read again."""
    cached_head: str | None
    """The cached head (PostgreSQL, compared as text)."""


@dataclass(frozen=True, kw_only=True)
class RecordSave:
    """A save's trip: the new entries, the record's guarded write and a run's checkpoint."""

    how: RecordWrite
    """How the record is written: over the revision read, as a new conversation, or as a fork."""
    insert_entries: Compiled
    entries: Sequence[NewEntry]
    record: Compiled
    """The record's write (with the entries and the checkpoint, on PostgreSQL one statement)."""
    bound: dict[str, Any]
    writes_record: bool
    """`False`: only the checkpoint is written."""
    checkpoint: Checkpoint | None
    dialect: Dialect
    """The dialect the checkpoint's statements are compiled for."""
    commit: bool
    """The trip is its own transaction, committed in it; else it joins the connection's."""
