"""Background execution of runs, decoupled from the HTTP requests that queued them.

A request queues a run in the database and hands its id to `Runner.submit`; the run is driven
by `agent.run_step` in a task of its own, so a client that disconnects neither stops nor loses
it. Several processes (workers) may share one database; a run is driven by the one worker that
holds its lease (see `store.leases`). Deliberate choices:

- **Claims, not trust.** `submit` only asks this process to try: `run_step` claims the run in
  one statement, and of workers trying at once exactly one drives it.
- **Claimed as it is queued.** A run queued here (`queue`) while this worker has a free slot is
  created claimed by it, in the request's own transaction, with the user's message count the
  rate limit needs: its task starts driving it with no transaction of its own. With no free slot
  it is queued free, for this worker's next slot or another worker's sweep.
- **Heartbeat.** Every `heartbeat_seconds`, one statement renews the leases of every run this
  worker drives (has a task for). A run no longer held, because another worker took it over after
  this one stalled past its lease, has its task cancelled; its writes are fenced off anyway. A
  task that ends with its run not ended (its claim missed) requeues what this worker still holds
  of it, so that the next sweep takes it at once.
- **Sweep.** Every `sweep_seconds`, the worker reserves, up to its free slots, runs nobody
  drives: queued for longer than a sweep with no owner (their process is busy or gone), or
  under a lapsed lease (their worker died). It drives them from their last checkpoint. On
  PostgreSQL, sweeping workers skip each other's rows instead of waiting on them.
- **Start.** `start` sweeps at once, without waiting for queued runs to age, then keeps the
  heartbeat and the sweep going. A run another live worker holds is never taken: its lease
  holds while its worker heartbeats.
- **Shutdown.** In-flight runs are asked to stop at their next checkpoint (the runtime's
  `stopping` event): each commits what it has, goes back to the queue and ends; shutdown waits
  for that, bounded, then cancels what is left (a cancelled run is requeued too, losing at most
  its node in flight). Any lease still held is then released, so other workers continue at once.
- Paused runs hold no task: a run waiting for approval has ended.
- A run that loses the database (PostgreSQL restarting) is not failed: its task retries it,
  with backoff, from its last checkpoint once the database answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta

from opentelemetry.trace import Span

from agent import Opened, Runtime, queue_run, run_step
from store import Claimed, DatabaseUnavailable, NotFound, RunKind, StoreError, now_utc

__all__ = ("Runner",)

logger = logging.getLogger(__name__)


class Runner:
    """Drives runs in background tasks, one task per run, and keeps this worker's leases."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        shutdown_timeout: float = 10.0,
        max_concurrent: int = 64,
        heartbeat_seconds: float = 10.0,
        sweep_seconds: float = 5.0,
        replay_window: timedelta | None = None,
    ) -> None:
        """`replay_window`: how long a finished run keeps its text deltas in the event log
        (`store.compaction`); `None` keeps them for as long as the thread lives."""
        self._runtime = runtime
        self._replay_window = replay_window
        self._compactor: asyncio.Task[None] | None = None
        self._leases = runtime.db.leases
        # Runs beyond this wait their turn here, queued, instead of exhausting the database pool.
        self._slots = asyncio.Semaphore(max_concurrent)
        self._max_concurrent = max_concurrent
        self._shutdown_timeout = shutdown_timeout
        self._heartbeat_seconds = heartbeat_seconds
        self._sweep_seconds = sweep_seconds
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._heart: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def max_concurrent(self) -> int:
        """How many runs this worker drives at once; more wait for a slot."""
        return self._max_concurrent

    @property
    def worker_id(self) -> str:
        return self._leases.worker.worker_id

    async def queue(
        self,
        thread_id: str,
        kind: RunKind,
        *,
        content: str,
        idempotency_key: str | None = None,
        user_id: str | None = None,
        create_unless: str | None = None,
        file_ids: Sequence[str] = (),
    ) -> Opened:
        """Queue a `message` or `regenerate` run (`agent.queue_run`) and drive it here if it is new.

        With `user_id`, a thread of another user is not found; with `create_unless` too, a missing
        thread is created as theirs, unless `create_unless` names a thread of theirs.

        Raises:
            NotFound: No such thread.
            RunActive: The thread has a run queued or running.
            ApprovalPending: The thread waits for decisions on tool calls.
        """
        claim = not self._closed and len(self._tasks) < self._max_concurrent
        opened = await queue_run(
            self._runtime,
            thread_id,
            kind,
            content=content,
            claim=claim,
            idempotency_key=idempotency_key,
            user_id=user_id,
            create_unless=create_unless,
            file_ids=file_ids,
        )
        if not opened.created:
            return opened
        if self._closed and opened.claimed is not None:
            # Shut down meanwhile: free it for another worker now rather than a lease later.
            await self._runtime.db.runs.requeue(opened.run.run_id)
            return opened
        self.submit(opened.run.run_id, claimed=opened.claimed, span=opened.span)
        return opened

    def submit(self, run_id: str, *, claimed: Claimed | None = None, span: Span | None = None) -> None:
        """Drive the run `run_id` in the background if this worker can claim it; a run driven here already is left alone.

        `claimed`: the run as `queue` claimed it, driven without a claim of its own; `span`: the span
        its attempt started with (`agent.Opened.span`).
        """
        if self._closed or run_id in self._tasks:
            return
        task = asyncio.create_task(self._drive(run_id, claimed, span), name=f"run {run_id}")
        self._tasks[run_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(run_id, None))

    def stop(self, run_id: str) -> bool:
        """Stop driving `run_id` here, if this worker drives it (a user cancelled it); whether it did."""
        task = self._tasks.get(run_id)
        if task is None or task.done():
            return False
        task.cancel()
        return True

    async def start(self) -> int:
        """Take over the runs nobody drives, then keep the heartbeat and the sweep going; return how many it took."""
        taken = await self.recover()
        self._heart = asyncio.create_task(
            self._every(self._heartbeat_seconds, self.heartbeat), name="heartbeat"
        )
        self._sweeper = asyncio.create_task(self._every(self._sweep_seconds, self.sweep), name="sweep")
        if self._replay_window is not None:
            # Every dozen sweeps (a minute by default): compaction is housekeeping, not latency.
            every = self._sweep_seconds * 12
            self._compactor = asyncio.create_task(self._every(every, self.compact), name="compact")
        logger.info(
            "worker %s: leases of %gs, heartbeat every %gs, sweep every %gs",
            self.worker_id,
            self._leases.worker.lease.total_seconds(),
            self._heartbeat_seconds,
            self._sweep_seconds,
        )
        return taken

    async def recover(self) -> int:
        """Drive the runs nobody drives now: queued with no owner, or under a lapsed lease; return how many.

        A dead process of this host (this server before a crash) holds its runs no longer: they are
        taken at once, not a lease later.
        """
        dead = await self._leases.expire_dead_local()
        if dead:
            logger.info("workers %s of this host are gone; their runs are free", ", ".join(dead))
        taken = await self._take(queued_for=timedelta(0))
        if taken:
            logger.info("recovering %d unfinished runs", taken)
        return taken

    async def sweep(self) -> int:
        """Drive, up to the free slots, runs nobody drives: queued a while with no owner, or under a lapsed lease."""
        taken = await self._take(queued_for=timedelta(seconds=self._sweep_seconds))
        if taken:
            logger.info("took over %d runs nobody drove", taken)
        return taken

    async def compact(self) -> int:
        """Drop the text deltas of runs finished longer than the replay window ago; return how many events."""
        if self._replay_window is None:
            return 0
        runs, events = await self._runtime.db.events.compact(now_utc() - self._replay_window)
        if runs:
            logger.info("compacted the events of %d finished runs (%d text deltas)", runs, events)
        return events

    async def heartbeat(self) -> list[str]:
        """Renew this worker's leases; stop driving the runs another worker took over, and return those."""
        held = set(await self._leases.heartbeat(list(self._tasks)))
        unconfirmed = [run_id for run_id in self._tasks if run_id not in held]
        lost = await self._leases.taken_over(unconfirmed)
        for run_id in lost:
            task = self._tasks.get(run_id)
            if task is not None:
                logger.warning("run %s was taken over by another worker; stopping it here", run_id)
                task.cancel()
        return lost

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def aclose(self) -> None:
        """Let in-flight runs reach a checkpoint and requeue themselves; cancel the late ones; release leases."""
        self._closed = True
        await _cancel(self._sweeper)
        await _cancel(self._compactor)
        self._runtime.stopping.set()
        tasks = list(self._tasks.values())
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self._shutdown_timeout)
            for task in late:
                task.cancel()
            if late:
                _, stuck = await asyncio.wait(late, timeout=self._shutdown_timeout)
                logger.warning(
                    "%d runs did not reach a checkpoint in time and were cancelled (%d did not stop)",
                    len(late),
                    len(stuck),
                )
        await _cancel(self._heart)
        try:
            released = await self._leases.release()
        except StoreError as error:
            logger.warning("could not release the leases of worker %s: %s", self.worker_id, error)
        else:
            if released:
                logger.info("released %d runs for other workers", len(released))

    async def _take(self, *, queued_for: timedelta) -> int:
        free = self._max_concurrent - len(self._tasks)
        if self._closed or free <= 0:
            return 0
        run_ids = await self._leases.sweep(limit=free, queued_for=queued_for)
        for run_id in run_ids:
            self.submit(run_id)
        return len(run_ids)

    async def _every(self, seconds: float, action: Callable[[], Awaitable[object]]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await action()
            except StoreError as error:
                # The database is down or saturated: try again next time, leases have slack.
                logger.warning("%s failed: %s", getattr(action, "__name__", "a periodic task"), error)
            except Exception:
                logger.exception("%s failed", getattr(action, "__name__", "a periodic task"))

    async def _drive(self, run_id: str, claimed: Claimed | None, span: Span | None = None) -> None:
        try:
            status = await self._drive_until_reachable(run_id, claimed, span)
            if status in ("queued", "running"):
                await self._let_go(run_id)
        except NotFound:
            # The thread was deleted while its run went on.
            logger.info("run %s ended: its thread is gone", run_id)
        except Exception:
            logger.exception("run %s could not be driven", run_id)
        else:
            logger.debug("run %s ended %s", run_id, status)

    async def _let_go(self, run_id: str) -> None:
        """Requeue the run not ended here if this worker still holds it: nobody else may claim it.

        Its claim missed (on PostgreSQL a claim skips a row locked for a moment, by this worker's
        own heartbeat say, after this worker's sweep reserved it), or this attempt was fenced off
        by this worker's own sweep. Requeued, the next sweep takes it; failing that, the lease
        lapses, the heartbeat renewing only the runs this worker drives.
        """
        try:
            if await self._runtime.db.runs.requeue(run_id):
                logger.info("run %s was not driven here; it is back in the queue", run_id)
        except StoreError as error:
            logger.warning("could not requeue run %s: %s; its lease will lapse", run_id, error)

    async def _drive_until_reachable(self, run_id: str, claimed: Claimed | None, span: Span | None) -> str:
        """Drive the run; while the database is unreachable, retry with backoff until shutdown.

        An attempt cut short by the database leaves the run `running` (requeueing it needs the
        database too): it is requeued here before the next attempt, which claims it anew.
        """
        backoff, interrupted = 0.5, False
        while True:
            try:
                if interrupted:
                    await self._runtime.db.runs.requeue(run_id)
                async with self._slots:
                    return await run_step(self._runtime, run_id, claimed=claimed, span=span)
            except DatabaseUnavailable as error:
                if self._closed:
                    raise  # the next start recovers it
                logger.warning("run %s waits for the database (%s)", run_id, error)
                interrupted, claimed, span = True, None, None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)


async def _cancel(task: asyncio.Task[None] | None) -> None:
    if task is None or task.done():
        return
    task.cancel()
    await asyncio.wait([task])
