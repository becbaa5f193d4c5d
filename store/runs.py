"""Runs: every agent run of a thread, from queued to its end, with one active run per thread."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from . import histories
from .checkpoints import Checkpoint, thread_status_after
from .claiming import start_reserving
from .engine import reader, translate_errors
from .errors import ApprovalPending, LeaseLost, NotFound, RunActive
from .events import NewEvent
from .leases import Worker, release
from .queueing import queue
from .schema import (
    ACTIVE_RUN_STATUSES,
    ApprovalRow,
    RunKind,
    RunRow,
    RunStatus,
    ThreadRow,
    metadata,
    now_utc,
)
from .threads import touch_thread
from .tracing import traced

__all__ = (
    "Claimed",
    "Queued",
    "Run",
    "Runs",
    "StoredRevision",
    "finish_run",
    "insert_run",
    "record_checkpoint",
    "thread_status_after",
)

_runs = metadata.tables[RunRow.__tablename__]
_approvals = metadata.tables[ApprovalRow.__tablename__]
_threads = metadata.tables[ThreadRow.__tablename__]


@dataclass(frozen=True)
class Run:
    run_id: str
    thread_id: str
    kind: RunKind
    status: RunStatus
    content: str | None
    idempotency_key: str | None
    error: str | None
    attempt: int
    checkpoints: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    lease_owner: str | None = None
    """The worker that holds (or last held) the run; see `store.leases`."""
    lease_expires_at: datetime | None = None
    file_ids: str | None = None
    """The files attached to a `message` run's user message, a JSON list of ids (`attached`)."""

    @property
    def attached(self) -> tuple[str, ...]:
        """The ids of the files attached to the run's user message, in order."""
        return () if not self.file_ids else tuple(json.loads(self.file_ids))


@dataclass(frozen=True)
class Claimed:
    """A run this worker holds and started: running, its attempt counted, a block of event ids reserved."""

    run: Run
    user_id: str
    """The user of the run's thread."""
    first_event_id: int
    """The first of the event ids reserved for the run."""
    messages_sent: tuple[timedelta, int] | None = None
    """Counted as the run was queued: the user's messages within a window, this one included."""
    conversation: StoredRevision | None = None
    """The thread's conversation as the run was queued (`None`: not read then)."""
    opening: tuple[NewEvent, ...] = ()
    """The run's first events, stored with it by the queueing, from `first_event_id` on."""


@dataclass(frozen=True)
class StoredRevision:
    """The revision of a stored conversation as a transaction read it; `revision` `None`: none stored.

    The run that holds the thread may load at this revision without reading it again
    (`SqlConversationStore.load_at`): only a run of the thread writes its conversation, and the
    thread has one run at a time; a write that came between anyway fails the run's first
    checkpoint as a conflict, as it would after any load.
    """

    revision: str | None


@dataclass(frozen=True)
class Queued:
    """What queueing a run did (`Runs.queue`)."""

    run: Run
    created: bool
    """`False`: the idempotency key named a run queued earlier, returned as it is."""
    claimed: Claimed | None = None
    """Set when the run was created claimed by this worker, started, ready to drive."""


class Runs:
    """The `runs` table."""

    def __init__(self, engine: AsyncEngine, *, worker: Worker | None = None) -> None:
        self._engine = engine
        self._reader = reader(engine)
        self.worker = Worker() if worker is None else worker
        """This process: the owner its claims name, and how long they hold."""

    @traced("queue_run")
    async def create_message_run(
        self, thread_id: str, *, content: str, idempotency_key: str | None = None
    ) -> tuple[Run, bool]:
        """Queue a run answering a user message; return it and whether it is new.

        The same `idempotency_key` again returns the run it created the first time.

        Raises:
            NotFound: No such thread.
            RunActive: The thread has a run queued or running.
            ApprovalPending: The thread waits for decisions on tool calls.
        """
        queued = await self._create(thread_id, "message", content=content, idempotency_key=idempotency_key)
        return queued.run, queued.created

    @traced("queue_run")
    async def create_regenerate_run(
        self, thread_id: str, *, content: str, idempotency_key: str | None = None
    ) -> tuple[Run, bool]:
        """Queue a run answering the thread's last user message again, `content`; return it and whether it is new.

        The run drops the last reply (the store keeps it as a branch) before it answers. Keyed
        and refused like `create_message_run`.
        """
        queued = await self._create(thread_id, "regenerate", content=content, idempotency_key=idempotency_key)
        return queued.run, queued.created

    @traced("queue_run")
    async def queue(
        self,
        thread_id: str,
        kind: RunKind,
        *,
        content: str,
        idempotency_key: str | None = None,
        claim_events: int | None = None,
        count_window: timedelta | None = None,
        user_id: str | None = None,
        run_id: str | None = None,
        opening: Sequence[NewEvent] = (),
        create_unless: str | None = None,
        file_ids: Sequence[str] = (),
    ) -> Queued:
        """Queue a `message` or `regenerate` run, as `create_message_run` does, and more in the same transaction.

        With `claim_events`, the run is created claimed by this worker and started (as
        `start_reserving` would, with that many event ids reserved): the worker drives it at once,
        with no transaction of its own to claim it; with `count_window` too, the user's messages
        within that window, across their threads, are counted for it (for a rate limit); with
        `opening` too, those events of the run (`run_id`, its id) are stored with it, the first
        reserved ids theirs (`Claimed.opening`): the run's first events cost no transaction of
        their own. With `user_id`, only a thread of that user is found (a request needs no read of
        the thread to check whose it is); with `create_unless` too, a missing thread is created
        as that user's (a chat's first message makes its thread in the same trip), unless
        `create_unless` is the id of a thread of theirs: then `NotFound`, nothing written. Refused
        like `create_message_run`. `file_ids`: files attached to the message (`Run.attached`).
        """
        return await self._create(
            thread_id,
            kind,
            content=content,
            idempotency_key=idempotency_key,
            claim_events=claim_events,
            count_window=count_window,
            user_id=user_id,
            run_id=run_id,
            opening=opening,
            create_unless=create_unless,
            file_ids=file_ids,
        )

    async def _create(
        self,
        thread_id: str,
        kind: RunKind,
        *,
        content: str,
        idempotency_key: str | None,
        claim_events: int | None = None,
        count_window: timedelta | None = None,
        user_id: str | None = None,
        run_id: str | None = None,
        opening: Sequence[NewEvent] = (),
        create_unless: str | None = None,
        file_ids: Sequence[str] = (),
    ) -> Queued:
        # Two statements, in one trip (`queueing.py`). The thread's UPDATE comes first: it serializes this thread's writers
        # (its row lock on PostgreSQL, the write lock on SQLite), and its RETURNING reads what
        # refuses a run. The active run is read, not left to the unique index: an INSERT meeting
        # a run row another transaction is changing would wait for it while holding the thread's
        # lock, which that transaction may want next (a checkpoint locks the run, then the thread).
        with translate_errors(f"queueing a run on thread {thread_id!r}"):
            since = None if count_window is None or claim_events is None else now_utc() - count_window
            worker = None if claim_events is None else self.worker
            try:
                refusal, state, row = await queue(
                    self._engine,
                    thread_id,
                    kind,
                    content,
                    idempotency_key,
                    worker,
                    claim_events=claim_events,
                    count_since=since,
                    user_id=user_id,
                    run_id=run_id,
                    opening=opening,
                    create_unless=create_unless,
                    file_ids=json.dumps(list(file_ids)) if file_ids else None,
                )
            except exc.IntegrityError as error:
                # A concurrent request with the same key, or a concurrent run, won the race.
                existing = await self._keyed(thread_id, idempotency_key)
                if existing is not None:
                    return Queued(existing, False)
                raise RunActive(f"thread {thread_id!r} already has a run in progress") from error
        match refusal:
            case "no thread":
                raise NotFound(f"no thread {thread_id!r}")
            case "keyed":
                # Nothing changed, and the keyed run is read as it is now.
                existing = await self._keyed(thread_id, idempotency_key)
                if existing is not None:
                    return Queued(existing, False)
                raise RunActive(f"thread {thread_id!r} already has a run in progress")
            case "active":
                raise RunActive(f"thread {thread_id!r} already has a run in progress")
            case "pending":
                raise ApprovalPending(f"thread {thread_id!r} waits for decisions on its tool calls")
            case _:
                pass
        assert state is not None
        assert row is not None
        run = Run(**{name: row[name] for name in Run.__dataclass_fields__})
        if claim_events is None:
            return Queued(run, True)
        sent = None
        if count_window is not None and state.sent is not None:
            sent = (count_window, state.sent + (kind == "message"))
        first = state.last_event_id - claim_events + 1
        revision = StoredRevision(state.revision)
        return Queued(run, True, Claimed(run, state.user_id, first, sent, revision, tuple(opening)))

    async def _keyed(self, thread_id: str, idempotency_key: str | None) -> Run | None:
        if idempotency_key is None:
            return None
        async with self._reader.connect() as connection:
            return await _by_key(connection, thread_id, idempotency_key)

    async def get(self, run_id: str) -> Run:
        with translate_errors(f"reading run {run_id!r}"):
            async with self._reader.connect() as connection:
                row = (
                    (await connection.execute(sa.select(_runs).where(_runs.c.run_id == run_id)))
                    .mappings()
                    .one_or_none()
                )
        if row is None:
            raise NotFound(f"no run {run_id!r}")
        return _run(row)

    async def of_thread(self, thread_id: str) -> list[Run]:
        """The thread's runs, oldest first."""
        query = (
            sa.select(_runs)
            .where(_runs.c.thread_id == thread_id)
            .order_by(_runs.c.created_at, _runs.c.run_id)
        )
        with translate_errors(f"reading the runs of thread {thread_id!r}"):
            async with self._reader.connect() as connection:
                rows = (await connection.execute(query)).mappings().all()
        return [_run(row) for row in rows]

    async def active(self, thread_id: str) -> Run | None:
        with translate_errors(f"reading the runs of thread {thread_id!r}"):
            async with self._reader.connect() as connection:
                return await _active(connection, thread_id)

    @traced("claim_run")
    async def start_reserving(
        self, run_id: str, *, events: int, trace_id: str | None = None
    ) -> tuple[Run, str, int] | None:
        """Claim a run for this worker, mark it running, count the attempt, and reserve `events` event ids.

        One transaction. The run is claimed if it is queued (and free, or reserved for this worker)
        or running under a lapsed lease (its worker died); of concurrent claimers exactly one gets
        it. Returns the run, its thread's user and the first reserved id, or `None` when the run
        cannot be claimed (another worker holds it, or it ended). `trace_id` is the trace of this
        attempt, kept on the run's row.
        """
        with translate_errors(f"starting run {run_id!r}"):
            # One trip (`claiming.py`): the claim and the reservation, one statement on PostgreSQL.
            started = await start_reserving(
                self._engine, self.worker, run_id, events=events, trace_id=trace_id
            )
        if started is None:
            return None
        row, user_id, first_event_id = started
        return Run(**{name: row[name] for name in Run.__dataclass_fields__}), user_id, first_event_id

    @traced("requeue_run")
    async def requeue(self, run_id: str) -> bool:
        """Put a run this worker holds back in the queue, free for any worker; `False` if it holds none."""
        with translate_errors(f"requeueing run {run_id!r}"):
            async with self._engine.begin() as connection:
                return bool(await release(connection, self.worker.worker_id, run_id))

    async def count_messages(self, user_id: str, *, since: datetime) -> int:
        """How many messages `user_id` sent since `since`, across their threads: the message runs queued."""
        query = (
            sa.select(sa.func.count())
            .select_from(_runs.join(_threads, _threads.c.thread_id == _runs.c.thread_id))
            .where(_threads.c.user_id == user_id, _runs.c.kind == "message", _runs.c.created_at >= since)
        )
        with translate_errors(f"counting the messages of user {user_id!r}"):
            async with self._reader.connect() as connection:
                return (await connection.execute(query)).scalar_one()

    @traced("finish_run")
    async def finish(
        self, run_id: str, status: RunStatus, *, error: str | None = None, trace_id: str | None = None
    ) -> None:
        """End a run this worker holds with `status`, and set its thread's status to match, in one unit of work.

        `trace_id`, when given, is kept on the run's row (a run claimed as it was queued has none yet).

        Raises:
            NotFound: No such run.
            LeaseLost: This worker does not hold the run (another one took it over).
        """
        with translate_errors(f"finishing run {run_id!r}"):
            async with self._engine.begin() as connection:
                await finish_run(
                    connection, run_id, status, error=error, owner=self.worker.worker_id, trace_id=trace_id
                )


async def finish_run(
    connection: AsyncConnection,
    run_id: str,
    status: RunStatus,
    *,
    error: str | None = None,
    owner: str | None = None,
    trace_id: str | None = None,
) -> None:
    """End a run inside the caller's unit of work; with `owner`, only if that worker holds it running.

    Raises:
        NotFound: No such run.
        LeaseLost: `owner` does not hold the run.
    """
    query = _runs.update().where(_runs.c.run_id == run_id)
    if owner is not None:
        query = query.where(_runs.c.lease_owner == owner, _runs.c.status == "running")
    values: dict[str, object] = {"status": status, "error": error, "finished_at": now_utc()}
    if trace_id is not None:
        values["trace_id"] = trace_id
    thread_id = (
        await connection.execute(query.values(**values).returning(_runs.c.thread_id))
    ).scalar_one_or_none()
    if thread_id is None:
        exists = await connection.execute(sa.select(_runs.c.run_id).where(_runs.c.run_id == run_id))
        if exists.first() is None:
            raise NotFound(f"no run {run_id!r}")
        raise LeaseLost(f"run {run_id!r} is no longer held by worker {owner!r}")
    await touch_thread(connection, thread_id, status=thread_status_after(status))


async def insert_run(
    connection: AsyncConnection,
    thread_id: str,
    *,
    kind: RunKind,
    content: str | None = None,
    idempotency_key: str | None = None,
) -> Run:
    """Queue a run inside the caller's unit of work, and mark the thread running."""
    run = Run(
        run_id=str(uuid.uuid4()),
        thread_id=thread_id,
        kind=kind,
        status="queued",
        content=content,
        idempotency_key=idempotency_key,
        error=None,
        attempt=0,
        checkpoints=0,
        created_at=now_utc(),
        started_at=None,
        finished_at=None,
    )
    await connection.execute(_runs.insert().values(**run.__dict__))
    await touch_thread(connection, thread_id, status="running")
    return run


async def record_checkpoint(
    connection: AsyncConnection,
    run: Run,
    *,
    event_id: int,
    finish: RunStatus | None = None,
    error: str | None = None,
    trace_id: str | None = None,
) -> None:
    """A run's bookkeeping for a checkpoint, inside its unit of work (see `checkpoints.py`).

    Counts the checkpoint (and ends the run with `finish`), and records on the thread the newest
    event the stored messages now reflect (and the status the run's end gives the thread).
    `trace_id`, when given, is kept on the run's row (a run claimed as it was queued has none yet).
    A checkpoint saved with a conversation passes a `Checkpoint` to `save_with` instead.

    Raises:
        LeaseLost: `run.lease_owner` no longer holds the run; the caller's transaction must roll back.
        NotFound: The run's thread was deleted.
    """
    checkpoint = Checkpoint(run=run, event_id=event_id, finish=finish, error=error, trace_id=trace_id)
    await histories.write(connection, None, checkpoint=checkpoint)


async def _active(connection: AsyncConnection, thread_id: str) -> Run | None:
    row = (
        (
            await connection.execute(
                sa.select(_runs).where(
                    _runs.c.thread_id == thread_id, _runs.c.status.in_(ACTIVE_RUN_STATUSES)
                )
            )
        )
        .mappings()
        .one_or_none()
    )
    return None if row is None else _run(row)


async def _by_key(connection: AsyncConnection, thread_id: str, key: str) -> Run | None:
    row = (
        (
            await connection.execute(
                sa.select(_runs).where(_runs.c.thread_id == thread_id, _runs.c.idempotency_key == key)
            )
        )
        .mappings()
        .one_or_none()
    )
    return None if row is None else _run(row)


def _run(row: RowMapping) -> Run:
    return Run(**{name: row[name] for name in Run.__dataclass_fields__})
