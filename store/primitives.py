"""The storage primitives of `SqlConversationStore`, bound to one call of its public API.

pydantic-ai's `ConversationStore` works out what a load reads and what a save writes, calling
back five primitives. What one call knows besides its arguments (the record it starts from, the
history a load read with its record, the run's checkpoint a save writes in its transaction) is
handed to those primitives by hand: a `Call` value, held by the `Primitives` the call runs the
ABC's algorithm on. Nothing travels on a ContextVar.
"""

from __future__ import annotations

import copy
import functools
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from sqlalchemy import exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from . import codec, histories
from .checkpoints import Checkpoint
from .engine import reader, translate_errors
from .erasure import erase_conversation
from .errors import CorruptData, NotFound
from .histories import NO_STOP, RECORD_COLUMNS, Writing
from .history_cache import CachedHistory, HistoryCache, Undecoded
from .history_trips import NewEntry
from .instructions import Instructions
from .schema import ConversationEntryRow, ConversationRecordRow, metadata

__all__ = ("ABSENT", "AlsoWrite", "Call", "Known", "PageCursor", "Prefetch", "Primitives", "Shared")

_entries = metadata.tables[ConversationEntryRow.__tablename__]
_records = metadata.tables[ConversationRecordRow.__tablename__]
_NEWEST_FIRST = (_records.c.updated_at.desc(), _records.c.conversation_id.desc())
_KNOWN_RECORDS = 4096

AlsoWrite = Callable[[AsyncConnection], Awaitable[None]]
"""More writes to commit in the same transaction as a save: a step's records, its run's progress."""


class _Absent:
    """A save's conversation is known not to be stored (a load just found it missing)."""


ABSENT = _Absent()
Known = ConversationRecord | _Absent | None
"""What a call knows of the stored record before it asks: the record, that there is none, or nothing."""


@dataclass
class Prefetch:
    """A load in progress: `read_record` reads the history in the same round trip and leaves it here."""

    limit: int | None
    head_id: str | None = None
    history: CachedHistory | None = None


@dataclass
class Call:
    """What one call of the public API hands the primitives besides their arguments."""

    known: Known = None
    """The record the call starts from, used by its first `read_record` only (a retry reads the database)."""
    prefetch: Prefetch | None = None
    """Set for a load: its record's read brings the history too."""
    checkpoint: Checkpoint | None = None
    """A run's checkpoint, written in the save's own trip."""
    also: AlsoWrite | None = None
    """More writes in the save's transaction."""
    connection: AsyncConnection | None = None
    """The transaction the save joins (`SqlConversationStore.save_with(first=)`), committed by its caller."""
    committed: list[Callable[[], None]] = field(default_factory=list[Callable[[], None]])
    """With `connection` or `held`: what the save remembers of itself, for the caller to run once it commits."""
    held: list[Writing] | None = None
    """Set: the save's write is not done but put here, for the caller's next save to carry (`carrying`)."""
    carrying: Writing | None = None
    """Another save's write (`held`), done first in this save's unit of work (SQLite)."""


@dataclass(frozen=True)
class PageCursor:
    """Where a page of conversations ended: the last one's save time and id."""

    updated_at: datetime
    conversation_id: str


@dataclass
class Shared:
    """What a store keeps across calls: its engine, and what it remembers of recent conversations."""

    engine: AsyncEngine
    histories: HistoryCache
    records: OrderedDict[str, ConversationRecord] = field(
        default_factory=OrderedDict[str, ConversationRecord]
    )
    """The newest record loaded or saved of each recent conversation (see `SqlConversationStore`)."""
    absent: OrderedDict[str, None] = field(default_factory=OrderedDict[str, None])
    """Conversations a load just found missing."""
    instructions: Instructions = field(default_factory=Instructions)
    """The instructions texts known, stored once apart from the messages naming them."""

    def __post_init__(self) -> None:
        # Reads need no transaction: skipping BEGIN/ROLLBACK saves round trips on PostgreSQL.
        self.reader = reader(self.engine)
        # SQLite writes on the loop's own thread when it can: no trip to overlap with other work.
        self.writes_inline = self.engine.dialect.name == "sqlite"

    def remember(self, record: ConversationRecord) -> None:
        self.records[record.conversation_id] = record
        self.records.move_to_end(record.conversation_id)
        while len(self.records) > _KNOWN_RECORDS:
            self.records.popitem(last=False)

    def mark_absent(self, conversation_id: str) -> None:
        self.absent[conversation_id] = None
        while len(self.absent) > _KNOWN_RECORDS:
            self.absent.popitem(last=False)


class Primitives(ConversationStore):
    """The ABC's algorithm over this backend's primitives, for one `call` on the `shared` store."""

    def __init__(self, shared: Shared, call: Call | None = None) -> None:
        self.shared = shared
        self.call = Call() if call is None else call

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        shared, call = self.shared, self.call
        known = call.known
        if known is ABSENT:
            call.known = None  # once, as below
            return None
        if isinstance(known, ConversationRecord) and known.conversation_id == conversation_id:
            call.known = None  # once: a retry inside the same save reads the database
            return known
        prefetch = call.prefetch
        cached = shared.histories.head_of(conversation_id) if prefetch is not None else None
        with translate_errors(f"reading conversation {conversation_id!r}"):
            # A load: the history comes next; read what the cache lacks of it in the same trip.
            row, rows = await histories.read_head(
                shared.reader,
                conversation_id,
                cached_head=None if cached is None else cached.head_id,
                limit=None if prefetch is None else prefetch.limit,
                history=prefetch is not None,
            )
        record = None if row is None else codec.record_from_row(row)
        if record is not None:
            shared.remember(record)
            if prefetch is not None and record.head_id is not None:
                if rows:
                    with translate_errors(f"reading the instructions of conversation {conversation_id!r}"):
                        await shared.instructions.fetch(shared.reader, (row[2] for row in rows))
                prefetch.head_id = record.head_id
                prefetch.history = self._history_read(record, rows, cached, prefetch.limit)
        elif prefetch is not None:
            shared.mark_absent(conversation_id)
        return record

    def _history_read(
        self,
        record: ConversationRecord,
        rows: list[tuple[Any, ...]] | None,
        cached: CachedHistory | None,
        limit: int | None,
    ) -> CachedHistory | None:
        """The history of `record` from the cache and the `rows` a load read, or `None` to read it again."""
        assert record.head_id is not None
        cache = self.shared.histories
        if (hit := cache.get(record.head_id)) is not None:
            return hit
        if rows is None:
            return None
        stop = cached.head_id if cached is not None and limit is None else None
        try:
            read = histories.decode_chain(
                rows,
                record.head_id,
                limit=limit,
                instructions=self.shared.instructions.texts,
                stop=stop or NO_STOP,
            )
        except NotFound:
            return None  # released meanwhile: `read_history` reads again, and the ABC retries
        if limit is not None:
            return read
        whole = (
            cached.extended(read.entries, read.sizes) if cached is not None and rows[0][1] == stop else read
        )
        cache.put(record.conversation_id, whole)
        return whole

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        return await self.read_records_page(scope=scope, limit=limit)

    async def read_records_page(
        self, *, scope: str | None = None, limit: int | None = None, after: PageCursor | None = None
    ) -> list[ConversationRecord]:
        """Records newest save first, starting after `after` (the last record of the previous page)."""
        query = sa.select(*RECORD_COLUMNS).order_by(*_NEWEST_FIRST)
        if scope is not None:
            query = query.where(_records.c.scope == scope)
        if after is not None:
            query = query.where(
                sa.tuple_(_records.c.updated_at, _records.c.conversation_id)
                < sa.tuple_(
                    sa.literal(after.updated_at, ConversationRecordRow.updated_at.type), after.conversation_id
                )
            )
        if limit is not None:
            query = query.limit(limit)
        with translate_errors("listing conversations"):
            async with self.shared.reader.connect() as connection:
                rows = (await connection.execute(query)).mappings().all()
        return [codec.record_from_row(row) for row in rows]

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        shared, call = self.shared, self.call
        conversation_id = record.conversation_id
        values = codec.record_values(record)
        # Only the new messages are encoded: the stored ones are never read back for a save.
        encoded: list[NewEntry] = []
        texts: dict[str, bytes] = {}
        for entry in new_entries:
            message, digest, text = codec.encode_entry(entry.message)
            encoded.append((entry.id, entry.parent_id, entry.kind, message, digest))
            if digest is not None and text is not None:
                texts[digest] = text

        async def write(target: AsyncEngine | AsyncConnection) -> None:
            written = await histories.write(
                target,
                values,
                entries=encoded,
                expected_revision=expected_revision,
                forked_from=record.forked_from,
                checkpoint=call.checkpoint,
                carrying=call.carrying,
            )
            if not written:
                raise ConversationConflict(conversation_id)

        def saved() -> CachedHistory | None:
            return self._history_saved(record, new_entries, encoded, texts)

        with translate_errors(f"saving conversation {conversation_id!r}"):
            if texts:
                # Before the save's own transaction: its shape stays the same with or without them.
                await shared.instructions.claim(shared.engine, texts)
            try:
                if call.held is not None:
                    # Written by the caller's next save, in its unit of work; remembered once it commits.
                    call.held.append(
                        Writing(
                            conversation_id,
                            values,
                            encoded,
                            expected_revision=expected_revision,
                            forked_from=record.forked_from,
                            checkpoint=call.checkpoint,
                        )
                    )
                    history = saved()
                    call.committed.append(lambda: self._remember(record, history))
                    return
                if call.connection is not None:
                    await write(call.connection)
                    if call.also is not None:
                        await call.also(call.connection)
                    # Remembered once the caller's transaction commits: it may yet roll back.
                    history = saved()
                    call.committed.append(lambda: self._remember(record, history))
                    return
                if call.also is not None:
                    async with shared.engine.begin() as connection:
                        await write(connection)
                        await call.also(connection)
                    cached = saved()
                else:
                    await write(shared.engine)  # its own transaction (on SQLite, on the loop's thread)
                    cached = saved()
            except exc.IntegrityError as error:
                # The record exists already, its head names an entry a concurrent delete released,
                # or a fork's source was deleted since it was read: all a conflict with another writer.
                raise ConversationConflict(conversation_id) from error
        self._remember(record, cached)

    def _remember(self, record: ConversationRecord, history: CachedHistory | None) -> None:
        """A save committed: its record, and its history to cache (`None`: not cached)."""
        self.shared.remember(record)
        if history is not None:
            self.shared.histories.put(record.conversation_id, history)

    def _history_saved(
        self,
        record: ConversationRecord,
        new_entries: Sequence[ConversationEntry],
        encoded: list[NewEntry],
        texts: dict[str, bytes],
    ) -> CachedHistory | None:
        """The history a save stores, to cache once it commits: the cached one it extends (or
        branches from) and the new entries, their bytes decoded when a load first reads them
        (`CachedHistory.entries`); `None` when not cached."""
        cache = self.shared.histories
        if not cache.enabled:
            return None
        base_id = new_entries[0].parent_id if new_entries else record.head_id
        base: CachedHistory | None = CachedHistory((), ()) if base_id is None else cache.get(base_id)
        for source in (record.conversation_id, record.forked_from):
            if base is not None:
                break
            cached = cache.head_of(source) if source is not None else None
            try:
                base = None if cached is None else cached.up_to(base_id)
            except CorruptData:
                return None  # the write committed: a load reads it from the database and says so
        if base is None:
            return None  # read from the database at the next load
        if encoded:
            # The cache holds what a load from the database would give: the stored bytes, validated
            # when a load first reads them.
            decode = functools.partial(
                codec.decode_messages,
                [(row[0], row[3]) for row in encoded],
                where="(just saved)",
                instructions=texts,
            )
            base = base.saved(
                Undecoded(tuple((entry.id, entry.parent_id) for entry in new_entries), decode),
                tuple(len(row[3]) + (0 if row[4] is None else len(texts[row[4]])) for row in encoded),
            )
        return base

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        shared = self.shared
        with translate_errors(f"deleting conversation {conversation_id!r}"):
            try:
                async with shared.engine.begin() as connection:
                    if not await erase_conversation(connection, conversation_id, revision=expected_revision):
                        raise ConversationConflict(conversation_id)
            except exc.IntegrityError as error:
                # A fork committed since the family was read points into the entries being released.
                raise ConversationConflict(conversation_id) from error
        shared.histories.forget(conversation_id)
        shared.records.pop(conversation_id, None)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        if not _is_uuid(entry_id):
            raise NotFound(f"no conversation entry {entry_id!r}")
        with translate_errors(f"reading entry {entry_id!r}"):
            async with self.shared.reader.connect() as connection:
                row = (
                    await connection.execute(
                        sa.select(_entries.c.entry_id, _entries.c.parent_id, _entries.c.message).where(
                            _entries.c.entry_id == entry_id
                        )
                    )
                ).one_or_none()
            if row is not None:
                await self.shared.instructions.fetch(self.shared.reader, [row.message])
        if row is None:
            raise NotFound(f"no conversation entry {entry_id!r}")
        (message,) = codec.decode_messages(
            [(row.entry_id, row.message)], where="(read alone)", instructions=self.shared.instructions.texts
        )
        return ConversationEntry(id=row.entry_id, parent_id=row.parent_id, message=message)

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        """The entries up to `head_id`, oldest first, or only the last `limit`: cached, or one recursive query."""
        prefetch = self.call.prefetch
        if prefetch is not None and prefetch.history is not None and prefetch.head_id == head_id:
            history, prefetch.history = prefetch.history, None
            if prefetch.limit is None or (limit is not None and limit <= prefetch.limit):
                return _handed_out(history, limit)
        if head_id is None or limit == 0:
            return []
        if not _is_uuid(head_id):
            raise NotFound(f"no conversation entry {head_id!r}")
        cache = self.shared.histories
        if (hit := cache.get(head_id)) is not None:
            return _handed_out(hit, limit)
        with translate_errors(f"reading the history ending at entry {head_id!r}"):
            rows = await histories.read_chain(self.shared.reader, head_id, limit=limit)
            await self.shared.instructions.fetch(self.shared.reader, (row[2] for row in rows))
        read = histories.decode_chain(rows, head_id, limit=limit, instructions=self.shared.instructions.texts)
        if limit is None:
            cache.put(None, read)
        return _handed_out(read, limit)


def _handed_out(history: CachedHistory, limit: int | None) -> list[ConversationEntry]:
    """A new list of `history`'s last `limit` entries, the last one's message a copy.

    Messages are treated as immutable, with one exception: pydantic-ai fills in the run's metadata
    on the last message of a history it continues when that is a request (`fill_run_metadata`),
    so that one must not be the object the cache holds. Copying it shallowly is enough: pydantic-ai
    replaces a message's lists rather than changing them.
    """
    kept = history.packed()
    entries = list(kept if limit is None else kept[max(len(kept) - limit, 0) :])
    if entries:
        last = entries[-1]
        entries[-1] = ConversationEntry(id=last.id, parent_id=last.parent_id, message=copy.copy(last.message))
    return entries


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
