"""Threads: a user's conversations with the agent, their status and their event-id counter."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .compiled import Compiled, fetch, per_dialect, write
from .engine import reader, translate_errors
from .errors import Conflict, NotFound
from .instructions import release_unused
from .retention import Stale, count_active_stale, erase_stale, erase_thread, find_stale
from .schema import ThreadRow, ThreadStatus, metadata, now_utc

__all__ = ("Purge", "Thread", "ThreadCursor", "Threads", "touch_thread", "touched")

logger = logging.getLogger(__name__)

_threads = metadata.tables[ThreadRow.__tablename__]


@dataclass(frozen=True)
class Thread:
    """A thread as the API shows it."""

    thread_id: str
    user_id: str
    title: str
    status: ThreadStatus
    created_at: datetime
    updated_at: datetime
    last_event_id: int
    checkpoint_event_id: int = 0
    """The newest event the stored messages reflect (see `ThreadRow.checkpoint_event_id`)."""
    agent: str | None = None
    """The agent a hand-off made the thread's speaker; `None`: the app's own agent."""


@per_dialect
def _create_statement(dialect: Dialect) -> Compiled:
    """A new thread's insert, every field of `Thread` bound by its name."""
    columns = {field.name: _threads.c[field.name] for field in fields(Thread)}
    values = {name: sa.bindparam(name, type_=column.type) for name, column in columns.items()}
    return Compiled.of(_threads.insert().values(values), dialect)


@dataclass(frozen=True)
class Purge:
    """What a purge erased (or, dry, would erase)."""

    removed: int
    """How many threads were erased (or would be)."""
    skipped_active: int
    """How many threads idle long enough were kept because a run of theirs is queued or running."""
    cutoff: datetime
    """Threads with no activity since this time were purged."""
    dry_run: bool
    instructions_released: int = 0
    """How many stored instructions texts went because no message names them any more (none when dry)."""


@dataclass(frozen=True)
class ThreadCursor:
    """Where a page of threads ended: the last one's activity time and id."""

    updated_at: datetime
    thread_id: str


class Threads:
    """The `threads` table."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._reader = reader(engine)

    async def create(self, *, user_id: str, title: str = "", thread_id: str | None = None) -> Thread:
        """A new thread of `user_id`, with the id `thread_id` when given.

        Raises:
            Conflict: A thread with that id exists already.
        """
        now = now_utc()
        thread = Thread(
            thread_id=thread_id or str(uuid.uuid4()),
            user_id=user_id,
            title=title,
            status="idle",
            created_at=now,
            updated_at=now,
            last_event_id=0,
        )
        with translate_errors(f"creating a thread for {user_id!r}"):
            try:
                # One unit of work on the driver: on SQLite, run on the loop's thread.
                await write(self._engine, _create_statement(self._engine.dialect), thread.__dict__)
            except exc.IntegrityError as error:
                raise Conflict(f"thread {thread.thread_id!r} exists already") from error
        return thread

    async def get(self, thread_id: str, *, user_id: str | None = None) -> Thread:
        """The thread, if it exists and (with `user_id`) belongs to that user.

        Raises:
            NotFound: No such thread for that user; another user's thread is indistinguishable.
        """
        # Every request of a thread reads it: a statement compiled once, run on the driver.
        compiled = _get_statement(self._reader.dialect, user_id is not None)
        with translate_errors(f"reading thread {thread_id!r}"):
            rows = await fetch(self._reader, compiled, {"thread_id": thread_id, "user_id": user_id})
        if not rows:
            raise NotFound(f"no thread {thread_id!r}")
        return _thread(dict(zip(_THREAD_COLUMNS, rows[0], strict=True)))

    async def list(self, *, user_id: str, limit: int, after: ThreadCursor | None = None) -> list[Thread]:
        """A user's threads, newest activity first: an index range scan on (user_id, updated_at, thread_id)."""
        query = (
            sa.select(_threads)
            .where(_threads.c.user_id == user_id)
            .order_by(_threads.c.updated_at.desc(), _threads.c.thread_id.desc())
            .limit(limit)
        )
        if after is not None:
            query = query.where(
                sa.tuple_(_threads.c.updated_at, _threads.c.thread_id)
                < sa.tuple_(sa.literal(after.updated_at, _threads.c.updated_at.type), after.thread_id)
            )
        with translate_errors(f"listing the threads of {user_id!r}"):
            async with self._reader.connect() as connection:
                rows = (await connection.execute(query)).mappings().all()
        return [_thread(row) for row in rows]

    async def rename(self, thread_id: str, title: str, *, user_id: str | None = None) -> Thread:
        """Give the thread a new title; its activity time stays, so the list keeps its order.

        Raises:
            NotFound: No such thread (for that user).
        """
        query = _threads.update().where(_threads.c.thread_id == thread_id).values(title=title)
        if user_id is not None:
            query = query.where(_threads.c.user_id == user_id)
        with translate_errors(f"renaming thread {thread_id!r}"):
            async with self._engine.begin() as connection:
                row = (await connection.execute(query.returning(*_threads.c))).mappings().one_or_none()
        if row is None:
            raise NotFound(f"no thread {thread_id!r}")
        return _thread(row)

    async def set_agent(self, thread_id: str, agent: str | None) -> None:
        """Make `agent` the thread's speaker (a hand-off); `None`: the app's own agent.

        Raises:
            NotFound: No such thread.
        """
        query = _threads.update().where(_threads.c.thread_id == thread_id).values(agent=agent)
        with translate_errors(f"handing thread {thread_id!r} to {agent!r}"):
            async with self._engine.begin() as connection:
                if (await connection.execute(query)).rowcount == 0:
                    raise NotFound(f"no thread {thread_id!r}")

    async def delete(self, thread_id: str) -> bool:
        """Erase the thread and everything of it in one transaction; return whether it existed.

        Its runs, events, approvals, records and ledger rows, its conversation and the entries no
        fork of it shares (see `store.retention`).
        """
        with translate_errors(f"deleting thread {thread_id!r}"):
            async with self._engine.begin() as connection:
                return await erase_thread(connection, thread_id)

    async def purge(
        self,
        older_than: timedelta,
        *,
        batch: int = 200,
        dry_run: bool = False,
        on_batch: Callable[[list[Thread]], object] | None = None,
    ) -> Purge:
        """Erase every thread with no activity for `older_than`, `batch` threads per transaction.

        Small transactions keep each lock short, so a purge can run beside a live server. A thread
        with a run queued or running is skipped however old it is: the run is going on (or waits to
        be recovered) and would lose its conversation; `Purge.skipped_active` counts them.

        Args:
            older_than: How long a thread must have been idle (its `updated_at`); positive.
            batch: How many threads one transaction erases.
            dry_run: Only find the threads, erase nothing.
            on_batch: Called with each batch of threads erased (or, dry, found).

        Raises:
            ValueError: `older_than` or `batch` is not positive.
        """
        if older_than <= timedelta(0) or batch < 1:
            raise ValueError(f"purge needs a positive age and batch, not {older_than!r} and {batch!r}")
        cutoff = now_utc() - older_than
        what = f"purging the threads idle since {cutoff.isoformat()}"
        removed = 0
        after: Stale = None
        while True:
            with translate_errors(what):
                if dry_run:
                    async with self._reader.connect() as connection:
                        rows = await find_stale(connection, cutoff, after=after, limit=batch)
                else:
                    async with self._engine.begin() as connection:
                        rows = await erase_stale(connection, cutoff, after=after, limit=batch)
            if not rows:
                break
            threads = [_thread(row) for row in rows]
            removed += len(threads)
            after = (threads[-1].updated_at, threads[-1].thread_id)
            if on_batch is not None:
                on_batch(threads)  # outside the error translation: its failures are its own
        released = 0
        with translate_errors(what):
            if not dry_run:
                async with self._engine.begin() as connection:
                    released = await release_unused(connection)
            async with self._reader.connect() as connection:
                skipped = await count_active_stale(connection, cutoff)
        logger.info(
            "%s %d threads idle since %s; skipped %d with a run queued or running",
            "found" if dry_run else "purged",
            removed,
            cutoff.isoformat(),
            skipped,
        )
        return Purge(
            removed=removed,
            skipped_active=skipped,
            cutoff=cutoff,
            dry_run=dry_run,
            instructions_released=released,
        )


TITLE_LENGTH = 60
"""The longest title a thread gets from its first message."""


def title_from(content: str) -> str:
    """A thread's title from its first message: the text on one line, cut at a word near `TITLE_LENGTH`."""
    text = " ".join(content.split())
    if len(text) <= TITLE_LENGTH:
        return text
    cut = text[: TITLE_LENGTH - 1]
    if text[len(cut)] != " " and " " in cut[TITLE_LENGTH // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" .,;:") + "…"


async def touch_thread(
    connection: AsyncConnection,
    thread_id: str,
    *,
    status: ThreadStatus | None = None,
    message: str | None = None,
) -> None:
    """Mark activity on a thread (and set its status), inside the caller's unit of work.

    As the first write of a transaction it also serializes the writers of one thread: the row
    lock on PostgreSQL, the database write lock on SQLite. A thread with no title yet is named
    after `message`, the user message the activity is about.

    Raises:
        NotFound: The thread does not exist (deleted meanwhile).
    """
    result = await connection.execute(
        _threads.update()
        .where(_threads.c.thread_id == thread_id)
        .values(**touched(status=status, message=message))
    )
    if result.rowcount != 1:
        raise NotFound(f"no thread {thread_id!r}")


def touched(*, status: ThreadStatus | None = None, message: str | None = None) -> dict[str, object]:
    """The values `touch_thread` sets, for a caller's own UPDATE of the thread's row."""
    values: dict[str, object] = {"updated_at": now_utc()}
    if status is not None:
        values["status"] = status
    if message is not None and (title := title_from(message)):
        values["title"] = sa.case((_threads.c.title == "", title), else_=_threads.c.title)
    return values


_THREAD_COLUMNS = tuple(_threads.c.keys())


@per_dialect
def _get_statement(dialect: Dialect, owned: bool) -> Compiled:
    """`Threads.get`'s statement: a thread by id, and (`owned`) its user's."""
    query = sa.select(_threads).where(_threads.c.thread_id == sa.bindparam("thread_id", type_=sa.String()))
    if owned:
        query = query.where(_threads.c.user_id == sa.bindparam("user_id", type_=sa.String()))
    return Compiled.of(query, dialect)


def _thread(row: Mapping[Any, Any]) -> Thread:
    return Thread(
        thread_id=row["thread_id"],
        user_id=row["user_id"],
        title=row["title"],
        status=row["status"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_event_id=row["last_event_id"],
        checkpoint_event_id=row["checkpoint_event_id"],
        agent=row["agent"],
    )
