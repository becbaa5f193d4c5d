"""`SqlConversationStore`: pydantic-ai's `ConversationStore` on SQLAlchemy, for SQLite and PostgreSQL.

The ABC works out which messages are new, where a history branches and what a fork shares; this
backend implements its storage primitives with one statement each where the ABC would issue many:

- a history is one recursive query from its head, not one query per entry;
- a save inserts its new entries and updates the record, guarded by its revision, in one
  transaction: two writers of the same revision can't both win, on either database;
- listing is an index range scan on `(scope, updated_at, conversation_id)`, newest first, with
  keyset pagination (`read_records_page`).

`delete` erases the entries no remaining conversation reaches. Entries a fork still shares stay
until the last conversation whose history (head or a branch it left) reaches them is deleted.
Conversations that share entries form a *family* (a root and its forks, transitively), recorded
on each record, so the search for entries still in use stays within the family.
"""

from __future__ import annotations

import asyncio
import copy
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import sqlalchemy as sa
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.run import AgentRunResult
from sqlalchemy import exc
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from . import codec, histories
from .checkpoints import Checkpoint
from .engine import (
    ConnectionOptions,
    check_reachable,
    create_engine,
    dispose,
    normalize_url,
    reader,
    redacted,
    translate_errors,
)
from .erasure import erase_conversation
from .errors import CorruptData, NotFound
from .histories import NO_STOP
from .histories import RECORD_COLUMNS as _RECORD_COLUMNS
from .history_cache import CachedHistory, HistoryCache, budget_from_env
from .migrate import upgrade
from .schema import ConversationEntryRow, ConversationRecordRow, metadata
from .tracing import store_span, traced

T = TypeVar("T")

__all__ = ("PageCursor", "SqlConversationStore", "erase_conversation")

_entries = metadata.tables[ConversationEntryRow.__tablename__]
_records = metadata.tables[ConversationRecordRow.__tablename__]

AlsoWrite = Callable[[AsyncConnection], Awaitable[None]]
"""More writes to commit in the same transaction as a save: a step's records, its run's progress."""

_also: ContextVar[tuple[Checkpoint | None, AlsoWrite | None] | None] = ContextVar(
    "durable_chat_also_write", default=None
)

_prefetch: ContextVar[_Prefetch | None] = ContextVar("durable_chat_prefetch", default=None)


class _Absent:
    """A save's conversation is known not to be stored (a load just found it missing)."""


_ABSENT = _Absent()
_MISSING = object()
_known: ContextVar[ConversationRecord | _Absent | None] = ContextVar(
    "durable_chat_known_record", default=None
)


@dataclass
class _Prefetch:
    """A load in progress: `read_record` reads the history in the same round trip and leaves it here."""

    limit: int | None
    head_id: str | None = None
    history: CachedHistory | None = None


_KNOWN_RECORDS = 4096


@dataclass(frozen=True)
class PageCursor:
    """Where a page of conversations ended: the last one's save time and id."""

    updated_at: datetime
    conversation_id: str


_NEWEST_FIRST = (_records.c.updated_at.desc(), _records.c.conversation_id.desc())


class SqlConversationStore(ConversationStore):
    """A `ConversationStore` on SQLite (aiosqlite) or PostgreSQL (asyncpg) through SQLAlchemy 2.

    Open one with `await SqlConversationStore.connect(url)`, which also brings the schema up to
    date, and close it with `await store.aclose()` (or use it as an async context manager).
    """

    def __init__(self, engine: AsyncEngine, *, history_cache_bytes: int | None = None) -> None:
        """`history_cache_bytes`: the budget of the cache of validated histories (0 disables it);
        by default `DURABLE_CHAT_HISTORY_CACHE_MB` megabytes, 64 unless set."""
        self._engine = engine
        self._histories = HistoryCache(
            budget_from_env() if history_cache_bytes is None else history_cache_bytes
        )
        # The newest record loaded or saved here of each recent conversation: a save of the
        # revision it names needs no read of its record first. One per conversation, not per
        # revision: an older revision is never saved on again (that save conflicts), and keeping
        # every revision filled the cache with one record per save (~1.3 kB each). A stale entry
        # is harmless: its revision no longer matches, or the revision-guarded write fails as a
        # conflict, as it must.
        self._records: OrderedDict[str, ConversationRecord] = OrderedDict()
        # Conversations a load just found missing: their first save needs no read either (a
        # concurrent creator makes the insert fail as a conflict, as it must).
        self._absent: OrderedDict[str, None] = OrderedDict()
        # Reads need no transaction: skipping BEGIN/ROLLBACK saves two round trips on PostgreSQL.
        self._reader = reader(engine)
        # SQLite writes on the loop's own thread when it can: no trip to overlap with other work.
        self._writes_inline = engine.dialect.name == "sqlite"

    @classmethod
    async def connect(
        cls,
        url: str | URL,
        *,
        migrate: bool = True,
        options: ConnectionOptions | None = None,
        history_cache_bytes: int | None = None,
    ) -> Self:
        """Open the database at `url`, creating or upgrading its schema unless `migrate` is false.

        `options` configure PostgreSQL connections (pool, timeouts, pooler mode);
        `history_cache_bytes` the history cache's budget, as in the constructor.

        Raises:
            UnsupportedDatabase: The URL names a dialect other than SQLite or PostgreSQL.
            DatabaseUnavailable: The database cannot be reached.
            SchemaTooNew: The database was upgraded by a newer durable-chat.
        """
        normalized = normalize_url(url)
        check_reachable(normalized)
        engine = create_engine(normalized, options=options)
        try:
            with translate_errors(f"connecting to {redacted(normalized)!r}", connecting=True):
                async with engine.connect() as connection:
                    await connection.execute(sa.text("SELECT 1"))
            if migrate:
                with translate_errors(f"upgrading the schema of {redacted(normalized)!r}"):
                    await upgrade(engine)
        except BaseException:
            await dispose(engine)
            raise
        return cls(engine, history_cache_bytes=history_cache_bytes)

    @property
    def history_cache(self) -> HistoryCache:
        """The validated histories this store keeps in memory, by head entry (see `history_cache.py`)."""
        return self._histories

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy engine, shared with the other stores of the same database."""
        return self._engine

    async def aclose(self) -> None:
        """Close every pooled connection."""
        await dispose(self._engine)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def load(
        self, conversation_id: str, *, limit: int | None = None, scope: str | None = None
    ) -> Conversation | None:
        token = _prefetch.set(_Prefetch(limit))
        try:
            with store_span("load"):
                return await super().load(conversation_id, limit=limit, scope=scope)
        except CorruptData as error:
            raise CorruptData(f"conversation {conversation_id!r} cannot be loaded: {error}") from error
        finally:
            _prefetch.reset(token)

    async def load_at(self, conversation_id: str, revision: str | None) -> Conversation | None:
        """`load`, for a caller that read the stored revision in a transaction of its own (`None`: none stored).

        What this store remembers of that revision (its record, and its history in the cache) is
        not read again: a run queued and claimed in one transaction that read the revision starts
        with no trip of its own for the load. Anything not remembered is read as `load` reads it.

        Only a caller that knows nothing else saved the conversation since may use it (the run
        holding a thread): a save in between would be missed here, and found only by the
        caller's next save, as a conflict.
        """
        if revision is None:
            self._mark_absent(conversation_id)
            return None
        remembered = self._records.get(conversation_id)
        if remembered is None or remembered.revision != revision:
            return await self.load(conversation_id)
        token = _known.set(remembered)  # `read_record` hands it over; the history comes from the cache
        try:
            return await self.load(conversation_id)
        finally:
            _known.reset(token)

    async def load_entries(
        self, conversation_id: str, *, limit: int | None = None, scope: str | None = None
    ) -> list[ConversationEntry] | None:
        token = _prefetch.set(_Prefetch(limit))
        try:
            return await super().load_entries(conversation_id, limit=limit, scope=scope)
        except CorruptData as error:
            raise CorruptData(f"conversation {conversation_id!r} cannot be loaded: {error}") from error
        finally:
            _prefetch.reset(token)

    async def save(
        self, conversation: Conversation | AgentRunResult[Any], *, scope: str | None = None
    ) -> list[ConversationEntry]:
        current = conversation.conversation if isinstance(conversation, AgentRunResult) else conversation
        known: ConversationRecord | _Absent | None
        if current.revision is None:
            # A conversation a load just found missing: its first save needs no read of its record.
            known = _ABSENT if self._absent.pop(current.conversation_id, _MISSING) is None else None
        else:
            remembered = self._records.get(current.conversation_id)
            known = remembered if remembered is not None and remembered.revision == current.revision else None
        token = _known.set(known)
        try:
            return await super().save(conversation, scope=scope)
        finally:
            _known.reset(token)

    @traced("checkpoint")
    async def save_with(
        self,
        conversation: Conversation,
        *,
        checkpoint: Checkpoint | None = None,
        also: AlsoWrite | None = None,
        scope: str | None = None,
    ) -> list[ConversationEntry]:
        """`save`, with a run's `checkpoint` and `also` in the same transaction: all commit, or none does.

        The conversation and the checkpoint are written in one trip (one statement on PostgreSQL);
        `also` adds a transaction around them, and its own statements through SQLAlchemy.

        Raises:
            LeaseLost: The checkpoint's run is no longer held by its worker; nothing was saved.
            NotFound: The checkpoint's run or thread was deleted; nothing was saved.
        """
        token = _also.set((checkpoint, also))
        try:
            return await self.save(conversation, scope=scope)
        finally:
            _also.reset(token)

    # -- the ABC's storage primitives ----------------------------------------------------------

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        known = _known.get()
        if known is _ABSENT:
            _known.set(None)  # once, as below
            return None
        if isinstance(known, ConversationRecord) and known.conversation_id == conversation_id:
            _known.set(None)  # once: a retry inside the same save reads the database
            return known
        prefetch = _prefetch.get()
        cached = self._histories.head_of(conversation_id) if prefetch is not None else None
        with translate_errors(f"reading conversation {conversation_id!r}"):
            # A load: the history comes next; read what the cache lacks of it in the same trip.
            row, rows = await histories.read_head(
                self._reader,
                conversation_id,
                cached_head=None if cached is None else cached.head_id,
                limit=None if prefetch is None else prefetch.limit,
                history=prefetch is not None,
            )
        record = None if row is None else codec.record_from_row(row)
        if record is not None:
            self._remember(record)
            if prefetch is not None and record.head_id is not None:
                prefetch.head_id = record.head_id
                prefetch.history = self._history_read(record, rows, cached, prefetch.limit)
        elif prefetch is not None:
            self._mark_absent(conversation_id)
        return record

    def _mark_absent(self, conversation_id: str) -> None:
        self._absent[conversation_id] = None
        while len(self._absent) > _KNOWN_RECORDS:
            self._absent.popitem(last=False)

    def _history_read(
        self,
        record: ConversationRecord,
        rows: list[tuple[Any, ...]] | None,
        cached: CachedHistory | None,
        limit: int | None,
    ) -> CachedHistory | None:
        """The history of `record` from the cache and the `rows` a load read, or `None` to read it again."""
        assert record.head_id is not None
        if (hit := self._histories.get(record.head_id)) is not None:
            return hit
        if rows is None:
            return None
        stop = cached.head_id if cached is not None and limit is None else None
        try:
            read = histories.decode_chain(rows, record.head_id, limit=limit, stop=stop or NO_STOP)
        except NotFound:
            return None  # released meanwhile: `read_history` reads again, and the ABC retries
        if limit is not None:
            return read
        whole = (
            cached.extended(read.entries, read.sizes) if cached is not None and rows[0][1] == stop else read
        )
        self._histories.put(record.conversation_id, whole)
        return whole

    def known_records(self) -> int:
        """How many conversations' records this store keeps in memory (for tests and monitoring)."""
        return len(self._records)

    def _remember(self, record: ConversationRecord) -> None:
        self._records[record.conversation_id] = record
        self._records.move_to_end(record.conversation_id)
        while len(self._records) > _KNOWN_RECORDS:
            self._records.popitem(last=False)

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        return await self.read_records_page(scope=scope, limit=limit)

    async def read_records_page(
        self, *, scope: str | None = None, limit: int | None = None, after: PageCursor | None = None
    ) -> list[ConversationRecord]:
        """Records newest save first, starting after `after` (the last record of the previous page)."""
        query = sa.select(*_RECORD_COLUMNS).order_by(*_NEWEST_FIRST)
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
            async with self._reader.connect() as connection:
                rows = (await connection.execute(query)).mappings().all()
        return [codec.record_from_row(row) for row in rows]

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        conversation_id = record.conversation_id
        values = codec.record_values(record)
        # Only the new messages are encoded: the stored ones are never read back for a save.
        encoded = [
            (entry.id, entry.parent_id, entry.kind, codec.encode_message(entry.message))
            for entry in new_entries
        ]
        checkpoint, also = _also.get() or (None, None)

        async def write(target: AsyncEngine | AsyncConnection) -> None:
            written = await histories.write(
                target,
                values,
                entries=encoded,
                expected_revision=expected_revision,
                forked_from=record.forked_from,
                checkpoint=checkpoint,
            )
            if not written:
                raise ConversationConflict(conversation_id)

        def saved() -> CachedHistory | None:
            return self._history_saved(record, new_entries, encoded)

        with translate_errors(f"saving conversation {conversation_id!r}"):
            try:
                if also is not None:
                    async with self._engine.begin() as connection:
                        await write(connection)
                        await also(connection)
                    cached = saved()
                elif self._writes_inline or not self._histories.enabled:
                    await write(self._engine)  # its own transaction (on SQLite, on the loop's thread)
                    cached = saved()
                else:
                    # Alone, the write is its own transaction, committed in its one trip; the history
                    # to cache is decoded while the database works.
                    cached = await _meanwhile(write(self._engine), saved)
            except exc.IntegrityError as error:
                # The record exists already, its head names an entry a concurrent delete released,
                # or a fork's source was deleted since it was read: all a conflict with another writer.
                raise ConversationConflict(conversation_id) from error
        self._remember(record)
        if cached is not None:
            self._histories.put(conversation_id, cached)

    def _history_saved(
        self,
        record: ConversationRecord,
        new_entries: Sequence[ConversationEntry],
        encoded: list[tuple[str, str | None, str, bytes]],
    ) -> CachedHistory | None:
        """The history a save stores, to cache once it commits: the cached one it extends (or
        branches from) and the new entries, decoded from their bytes; `None` when not cached."""
        if not self._histories.enabled:
            return None
        base_id = new_entries[0].parent_id if new_entries else record.head_id
        base: CachedHistory | None = (
            CachedHistory((), ()) if base_id is None else self._histories.get(base_id)
        )
        for source in (record.conversation_id, record.forked_from):
            if base is not None:
                break
            cached = self._histories.head_of(source) if source is not None else None
            base = None if cached is None else cached.up_to(base_id)
        if base is None:
            return None  # read from the database at the next load
        if encoded:
            # The cache holds what a load from the database would give: the stored bytes, validated.
            try:
                messages = codec.decode_messages([(row[0], row[3]) for row in encoded], where="(just saved)")
            except CorruptData:
                return None
            base = base.extended(
                tuple(
                    ConversationEntry(id=entry.id, parent_id=entry.parent_id, message=message)
                    for entry, message in zip(new_entries, messages, strict=True)
                ),
                tuple(len(row[3]) for row in encoded),
            )
        return base

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        with translate_errors(f"deleting conversation {conversation_id!r}"):
            try:
                async with self._engine.begin() as connection:
                    if not await erase_conversation(connection, conversation_id, revision=expected_revision):
                        raise ConversationConflict(conversation_id)
            except exc.IntegrityError as error:
                # A fork committed since the family was read points into the entries being released.
                raise ConversationConflict(conversation_id) from error
        self._histories.forget(conversation_id)
        self._records.pop(conversation_id, None)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        if not _is_uuid(entry_id):
            raise NotFound(f"no conversation entry {entry_id!r}")
        with translate_errors(f"reading entry {entry_id!r}"):
            async with self._reader.connect() as connection:
                row = (
                    await connection.execute(
                        sa.select(_entries.c.entry_id, _entries.c.parent_id, _entries.c.message).where(
                            _entries.c.entry_id == entry_id
                        )
                    )
                ).one_or_none()
        if row is None:
            raise NotFound(f"no conversation entry {entry_id!r}")
        (message,) = codec.decode_messages([(row.entry_id, row.message)], where="(read alone)")
        return ConversationEntry(id=row.entry_id, parent_id=row.parent_id, message=message)

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        """The entries up to `head_id`, oldest first, or only the last `limit`: cached, or one recursive query."""
        prefetch = _prefetch.get()
        if prefetch is not None and prefetch.history is not None and prefetch.head_id == head_id:
            history, prefetch.history = prefetch.history, None
            if prefetch.limit is None or (limit is not None and limit <= prefetch.limit):
                return _handed_out(history, limit)
        if head_id is None or limit == 0:
            return []
        if not _is_uuid(head_id):
            raise NotFound(f"no conversation entry {head_id!r}")
        if (hit := self._histories.get(head_id)) is not None:
            return _handed_out(hit, limit)
        with translate_errors(f"reading the history ending at entry {head_id!r}"):
            rows = await histories.read_chain(self._reader, head_id, limit=limit)
        read = histories.decode_chain(rows, head_id, limit=limit)
        if limit is None:
            self._histories.put(None, read)
        return _handed_out(read, limit)


async def _meanwhile(trip: Coroutine[Any, Any, None], work: Callable[[], T]) -> T:
    """`work()`, done on the loop while `trip` waits for the database, once `trip` succeeded.

    The trip runs as a task that sends its statement before `work` starts, and its outcome comes
    first, as if it had been awaited directly: a caller cancelled meanwhile cancels it, and should
    `work` fail, its error is raised once the trip ended well.
    """
    task = asyncio.ensure_future(trip)
    try:
        await asyncio.sleep(0)  # the task's first step: its statement goes out
    except BaseException:
        task.cancel()
        task.add_done_callback(_retrieve)
        raise
    try:
        done = work()
    except Exception:
        await task
        raise
    await task
    return done


def _retrieve(task: asyncio.Future[None]) -> None:
    # A trip cancelled on the way out of `_meanwhile`: its own outcome is not reported twice.
    if not task.cancelled():
        task.exception()


def _handed_out(history: CachedHistory, limit: int | None) -> list[ConversationEntry]:
    """A new list of `history`'s last `limit` entries, the last one's message a copy.

    Messages are treated as immutable, with one exception: pydantic-ai fills in the run's metadata
    on the last message of a history it continues when that is a request (`fill_run_metadata`),
    so that one must not be the object the cache holds. Copying it shallowly is enough: pydantic-ai
    replaces a message's lists rather than changing them.
    """
    kept = history.entries
    entries = list(kept if limit is None else kept[max(len(kept) - limit, 0) :])
    if entries:
        last = entries[-1]
        entries[-1] = ConversationEntry(id=last.id, parent_id=last.parent_id, message=copy.copy(last.message))
    return entries


def _is_uuid(value: str) -> bool:
    import uuid

    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
