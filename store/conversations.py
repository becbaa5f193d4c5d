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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import sqlalchemy as sa
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationEntry, ConversationRecord, ConversationStore
from pydantic_ai.run import AgentRunResult
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from .checkpoints import Checkpoint
from .engine import (
    ConnectionOptions,
    check_reachable,
    create_engine,
    dispose,
    normalize_url,
    redacted,
    translate_errors,
)
from .erasure import erase_conversation
from .errors import CorruptData
from .histories import Writing, carries
from .history_cache import HistoryCache, budget_from_env
from .migrate import upgrade
from .primitives import ABSENT, AlsoWrite, Call, Known, PageCursor, Prefetch, Primitives, Shared
from .tracing import store_span, traced

__all__ = ("AlsoWrite", "PageCursor", "Saving", "SqlConversationStore", "erase_conversation")


@dataclass(frozen=True)
class Saving:
    """A save for another's transaction to carry (`SqlConversationStore.save_with(first=)`)."""

    conversation: Conversation
    checkpoint: Checkpoint | None = None
    also: AlsoWrite | None = None
    scope: str | None = None


class SqlConversationStore(ConversationStore):
    """A `ConversationStore` on SQLite (aiosqlite) or PostgreSQL (asyncpg) through SQLAlchemy 2.

    Open one with `await SqlConversationStore.connect(url)`, which also brings the schema up to
    date, and close it with `await store.aclose()` (or use it as an async context manager).
    """

    def __init__(self, engine: AsyncEngine, *, history_cache_bytes: int | None = None) -> None:
        """`history_cache_bytes`: the budget of the cache of validated histories (0 disables it);
        by default `DURABLE_CHAT_HISTORY_CACHE_MB` megabytes, 64 unless set."""
        # Besides the cache, the newest record loaded or saved here of each recent conversation: a
        # save of the revision it names needs no read of its record first. One per conversation,
        # not per revision: an older revision is never saved on again (that save conflicts), and
        # keeping every revision filled the memory with one record per save. A stale entry is
        # harmless: its revision no longer matches, or the revision-guarded write fails as a
        # conflict, as it must. And the conversations a load just found missing: their first save
        # needs no read either (a concurrent creator makes the insert fail as a conflict).
        self._shared = Shared(
            engine, HistoryCache(budget_from_env() if history_cache_bytes is None else history_cache_bytes)
        )
        self.carrying_pays = True
        """Whether a delegated run's checkpoint carries its parent's response (`save_with(first=)`)
        rather than have it saved alone before, and the parent's checkpoint a delegated run's end:
        a commit fewer each, on PostgreSQL in one transaction, on SQLite in one unit of work on the
        loop's thread. Tests and benchmarks turn it off to compare."""

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
        return self._shared.histories

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy engine, shared with the other stores of the same database."""
        return self._shared.engine

    async def aclose(self) -> None:
        """Close every pooled connection."""
        await dispose(self._shared.engine)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _for(self, call: Call) -> Primitives:
        """The ABC's algorithm for one call, its primitives handed `call`."""
        return Primitives(self._shared, call)

    async def load(
        self, conversation_id: str, *, limit: int | None = None, scope: str | None = None
    ) -> Conversation | None:
        return await self._load(conversation_id, limit=limit, scope=scope, known=None)

    async def _load(
        self, conversation_id: str, *, limit: int | None, scope: str | None, known: Known
    ) -> Conversation | None:
        try:
            with store_span("load"):
                return await self._for(Call(known=known, prefetch=Prefetch(limit))).load(
                    conversation_id, limit=limit, scope=scope
                )
        except CorruptData as error:
            raise CorruptData(f"conversation {conversation_id!r} cannot be loaded: {error}") from error

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
            self._shared.mark_absent(conversation_id)
            return None
        remembered = self._shared.records.get(conversation_id)
        if remembered is None or remembered.revision != revision:
            return await self.load(conversation_id)
        # `read_record` hands the record over; the history comes from the cache.
        return await self._load(conversation_id, limit=None, scope=None, known=remembered)

    async def load_entries(
        self, conversation_id: str, *, limit: int | None = None, scope: str | None = None
    ) -> list[ConversationEntry] | None:
        try:
            return await self._for(Call(prefetch=Prefetch(limit))).load_entries(
                conversation_id, limit=limit, scope=scope
            )
        except CorruptData as error:
            raise CorruptData(f"conversation {conversation_id!r} cannot be loaded: {error}") from error

    async def save(
        self, conversation: Conversation | AgentRunResult[Any], *, scope: str | None = None
    ) -> list[ConversationEntry]:
        return await self._save(conversation, Call(), scope=scope)

    async def _save(
        self, conversation: Conversation | AgentRunResult[Any], call: Call, *, scope: str | None
    ) -> list[ConversationEntry]:
        """`save`, the record it starts from looked up in what this store remembers."""
        shared = self._shared
        current = conversation.conversation if isinstance(conversation, AgentRunResult) else conversation
        if current.revision is None:
            # A conversation a load just found missing: its first save needs no read of its record.
            call.known = ABSENT if current.conversation_id in shared.absent else None
            shared.absent.pop(current.conversation_id, None)
        else:
            remembered = shared.records.get(current.conversation_id)
            call.known = (
                remembered if remembered is not None and remembered.revision == current.revision else None
            )
        return await self._for(call).save(conversation, scope=scope)

    @traced("checkpoint")
    async def save_with(
        self,
        conversation: Conversation,
        *,
        checkpoint: Checkpoint | None = None,
        also: AlsoWrite | None = None,
        scope: str | None = None,
        first: Saving | None = None,
    ) -> list[ConversationEntry]:
        """`save`, with a run's `checkpoint` and `also` in the same transaction: all commit, or none does.

        The conversation and the checkpoint are written in one trip (one statement on PostgreSQL);
        `also` adds a transaction around them, and its own statements through SQLAlchemy. `first`:
        another conversation's save (a delegated run's parent's), written before this one in the
        same transaction (without `also`, on SQLite one unit of work on the loop's thread, on
        PostgreSQL one statement where `histories.carries` says it can); should it fail, both
        conversations are left as they were.

        Raises:
            LeaseLost: The checkpoint's run is no longer held by its worker; nothing was saved.
            NotFound: The checkpoint's run or thread was deleted; nothing was saved.
        """
        if first is None:
            return await self._save(conversation, Call(checkpoint=checkpoint, also=also), scope=scope)
        committed: list[Callable[[], None]] = []
        # A save advances its conversation's revision as it writes: on a rollback, both go back.
        states = [(c, dict(vars(c))) for c in (first.conversation, conversation)]
        try:
            shared = self._shared
            if (
                first.also is None
                and also is None
                and carries(shared.engine.dialect, first.checkpoint, checkpoint)
            ):
                # One unit of work on SQLite's loop thread, one statement on PostgreSQL (`histories.write`).
                held: list[Writing] = []
                carried = Call(checkpoint=first.checkpoint, held=held, committed=committed)
                await self._save(first.conversation, carried, scope=first.scope)
                [writing] = held
                entries = await self._save(
                    conversation, Call(checkpoint=checkpoint, carrying=writing), scope=scope
                )
            else:
                with translate_errors(f"saving conversation {conversation.conversation_id!r}"):
                    async with shared.engine.begin() as connection:
                        carried = Call(checkpoint=first.checkpoint, also=first.also, connection=connection)
                        carried.committed = committed
                        await self._save(first.conversation, carried, scope=first.scope)
                        call = Call(checkpoint=checkpoint, also=also, connection=connection)
                        call.committed = committed
                        entries = await self._save(conversation, call, scope=scope)
        except BaseException:
            for saved, state in states:
                vars(saved).clear()
                vars(saved).update(state)
            raise
        for remember in committed:
            remember()
        return entries

    def known_records(self) -> int:
        """How many conversations' records this store keeps in memory (for tests and monitoring)."""
        return len(self._shared.records)

    # -- the ABC's storage primitives, for its own algorithms (branch, fork, delete, list) -------

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        return await self._for(Call()).read_record(conversation_id)

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        return await self.read_records_page(scope=scope, limit=limit)

    async def read_records_page(
        self, *, scope: str | None = None, limit: int | None = None, after: PageCursor | None = None
    ) -> list[ConversationRecord]:
        """Records newest save first, starting after `after` (the last record of the previous page)."""
        return await self._for(Call()).read_records_page(scope=scope, limit=limit, after=after)

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        await self._for(Call()).write_record(
            record, new_entries=new_entries, expected_revision=expected_revision
        )

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        await self._for(Call()).delete_record(conversation_id, expected_revision=expected_revision)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        return await self._for(Call()).read_entry(entry_id)

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        """The entries up to `head_id`, oldest first, or only the last `limit`: cached, or one recursive query."""
        return await self._for(Call()).read_history(head_id, limit=limit)
