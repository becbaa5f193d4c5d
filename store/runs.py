"""Runs: every agent run of a thread, from queued to its end, with one active run per thread."""

from __future__ import annotations

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
from .events import NewEvent, insert_reserved
from .files import StoredFile
from .leases import Worker, release
from .queueing import Claim, NewRun, queue
from .run import Run
from .schema import (
    ApprovalRow,
    RunKind,
    RunRow,
    RunStatus,
    ThreadRow,
    active,
    metadata,
    now_utc,
    status_is,
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
    attached: tuple[StoredFile, ...] = ()
    """The files the run's message attaches, as the queueing's caller read them (`Claim.attached`)."""


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
    async def queue(self, new: NewRun, claim: Claim | None = None) -> Queued:
        """Queue a `message` or `regenerate` run (`new`), in one transaction; with `claim`, claimed by this worker.

        The same `new.idempotency_key` again returns the run it queued the first time
        (`Queued.created` false). A `regenerate` run drops the last reply (the store keeps it as a
        branch) before it answers the thread's last user message again. With `claim`, the run is
        created claimed by this worker and started (as `start_reserving` would): the worker drives
        it at once, with no transaction of its own to claim it, and its opening events cost no
        transaction of their own either (`Claimed.opening`).

        Raises:
            NotFound: No such thread (or not `new.user_id`'s; with `new.create_unless`, that thread of theirs).
            RunActive: The thread has a run queued or running.
            ApprovalPending: The thread waits for decisions on tool calls.
        """
        thread_id, kind = new.thread_id, new.kind
        # Two statements, in one trip (`queueing.py`). The thread's UPDATE comes first: it serializes this thread's writers
        # (its row lock on PostgreSQL, the write lock on SQLite), and its RETURNING reads what
        # refuses a run. The active run is read, not left to the unique index: an INSERT meeting
        # a run row another transaction is changing would wait for it while holding the thread's
        # lock, which that transaction may want next (a checkpoint locks the run, then the thread).
        with translate_errors(f"queueing a run on thread {thread_id!r}"):
            try:
                refusal, state, row = await queue(
                    self._engine, new, claim, worker=None if claim is None else self.worker
                )
            except exc.IntegrityError as error:
                # A concurrent request with the same key, or a concurrent run, won the race.
                existing = await self._keyed(thread_id, new.idempotency_key)
                if existing is not None:
                    return Queued(existing, False)
                raise RunActive(f"thread {thread_id!r} already has a run in progress") from error
        match refusal:
            case "no thread":
                raise NotFound(f"no thread {thread_id!r}")
            case "keyed":
                # Nothing changed, and the keyed run is read as it is now.
                existing = await self._keyed(thread_id, new.idempotency_key)
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
        if claim is None:
            return Queued(run, True)
        sent = None
        if claim.count_window is not None and state.sent is not None:
            sent = (claim.count_window, state.sent + (kind == "message"))
        first = state.last_event_id - claim.events + 1
        revision = StoredRevision(state.revision)
        return Queued(
            run,
            True,
            Claimed(run, state.user_id, first, sent, revision, tuple(claim.opening), tuple(claim.attached)),
        )

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
        self,
        run_id: str,
        status: RunStatus,
        *,
        error: str | None = None,
        trace_id: str | None = None,
        events: Sequence[tuple[int, NewEvent]] = (),
    ) -> None:
        """End a run this worker holds with `status`, and set its thread's status to match, in one unit of work.

        `trace_id`, when given, is kept on the run's row (a run claimed as it was queued has none yet).
        `events` (`(event_id, NewEvent)`, ids reserved): stored in the same unit of work, the run's
        end among them, so that they are stored if and only if the run ended.

        Raises:
            NotFound: No such run.
            LeaseLost: This worker does not hold the run (another one took it over).
        """
        with translate_errors(f"finishing run {run_id!r}"):
            async with self._engine.begin() as connection:
                thread_id = await finish_run(
                    connection, run_id, status, error=error, owner=self.worker.worker_id, trace_id=trace_id
                )
                await insert_reserved(connection, thread_id, events)


async def finish_run(
    connection: AsyncConnection,
    run_id: str,
    status: RunStatus,
    *,
    error: str | None = None,
    owner: str | None = None,
    trace_id: str | None = None,
) -> str:
    """End a run inside the caller's unit of work; with `owner`, only if that worker holds it running.

    Returns the run's thread.

    Raises:
        NotFound: No such run.
        LeaseLost: `owner` does not hold the run.
    """
    query = _runs.update().where(_runs.c.run_id == run_id)
    if owner is not None:
        query = query.where(_runs.c.lease_owner == owner, status_is(_runs.c.status, "running"))
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
    return str(thread_id)


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
                sa.select(_runs).where(_runs.c.thread_id == thread_id, active(_runs.c.status))
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
