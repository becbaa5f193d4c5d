"""`Database`: every table of durable-chat behind one engine, opened and closed together."""

from __future__ import annotations

from types import TracebackType
from typing import Self

from sqlalchemy.engine import URL

from .approvals import Approvals
from .blobs import Blobs, open_blobs
from .conversations import SqlConversationStore
from .engine import ConnectionOptions
from .events import EventLog
from .files import Files
from .leases import Leases, Worker
from .ledger import Ledger
from .records import Records
from .reviews import Reviews
from .runs import Runs
from .threads import Threads
from .webhooks import Webhooks

__all__ = ("Database",)


class Database:
    """The data layer of one database: conversations, threads, runs, events, approvals, records, the ledger, files."""

    def __init__(
        self, conversations: SqlConversationStore, *, worker: Worker | None = None, blobs: Blobs | None = None
    ) -> None:
        """`worker`: this process's identity and lease length for claiming runs (a new identity by default);
        `blobs`: where files' bytes are kept (the database by default)."""
        engine = conversations.engine
        self.engine = engine
        self.conversations = conversations
        self.threads = Threads(engine)
        self.runs = Runs(engine, worker=worker)
        self.leases = Leases(engine, self.runs.worker)
        self.events = EventLog(engine)
        self.approvals = Approvals(engine)
        self.reviews = Reviews(engine)
        self.webhooks = Webhooks(engine)
        self.records = Records(engine)
        self.ledger = Ledger(engine)
        self.files = Files(engine, open_blobs(None, engine) if blobs is None else blobs)

    @classmethod
    async def connect(
        cls,
        url: str | URL,
        *,
        migrate: bool = True,
        options: ConnectionOptions | None = None,
        worker: Worker | None = None,
        files_url: str | None = None,
    ) -> Self:
        """Open the database at `url`, creating or upgrading its schema (see `SqlConversationStore.connect`).

        `files_url` names where files' bytes are kept (`store.blobs.open_blobs`; the database by default).
        """
        conversations = await SqlConversationStore.connect(url, migrate=migrate, options=options)
        try:
            blobs = open_blobs(files_url, conversations.engine)
        except BaseException:
            await conversations.aclose()
            raise
        return cls(conversations, worker=worker, blobs=blobs)

    async def delete_thread(self, thread_id: str) -> None:
        """Erase a thread: its messages, events, runs, approvals, records, ledger rows and files, in one
        transaction; then the bytes of its files that no other file uses."""
        blobs = await self.files.blobs_of_thread(thread_id)
        await self.threads.delete(thread_id)
        await self.files.release(blobs)

    async def aclose(self) -> None:
        await self.files.blobs.aclose()
        await self.conversations.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
