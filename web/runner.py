"""Background execution of runs, decoupled from the HTTP requests that queued them.

A request queues a run in the database and hands its id to `Runner.submit`; the run is driven
by `agent.run_step` in a task of its own, so a client that disconnects neither stops nor loses
it. Deliberate choices:

- At startup, `recover` drives every run left unfinished: `queued` ones never started, and
  `running` ones, left by a process that died, are put back in the queue first; each continues
  from its last checkpoint. With several processes on one database, a process starting while
  another one runs a run would take that run over too (the step function's `start` lets only
  one of them drive it at a time, and side effects are exactly-once by the ledger).
- At shutdown, in-flight runs are asked to stop at their next checkpoint (the runtime's
  `stopping` event): each commits what it has, goes back to the queue and ends; shutdown waits
  for that, bounded, then cancels what is left (a cancelled run is requeued too, losing at most
  its node in flight). The next start recovers them all.
- Paused runs hold no task: a run waiting for approval has ended.
- A run that loses the database (PostgreSQL restarting) is not failed: its task retries it,
  with backoff, from its last checkpoint once the database answers.
"""

from __future__ import annotations

import asyncio
import logging

from agent import Runtime, run_step
from store import DatabaseUnavailable, NotFound

__all__ = ("Runner",)

logger = logging.getLogger(__name__)


class Runner:
    """Drives submitted runs in background tasks, one task per run."""

    def __init__(self, runtime: Runtime, *, shutdown_timeout: float = 10.0, max_concurrent: int = 16) -> None:
        self._runtime = runtime
        # Runs beyond this wait their turn here, queued, instead of exhausting the database pool.
        self._slots = asyncio.Semaphore(max_concurrent)
        self._shutdown_timeout = shutdown_timeout
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._closed = False

    def submit(self, run_id: str) -> None:
        """Drive the queued run `run_id` in the background; a run already driven here is left alone."""
        if self._closed or run_id in self._tasks:
            return
        task = asyncio.create_task(self._drive(run_id), name=f"run {run_id}")
        self._tasks[run_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(run_id, None))

    async def recover(self) -> int:
        """Requeue the runs a dead process left `running`, drive every unfinished run; return how many."""
        unfinished = await self._runtime.db.runs.unfinished()
        for run in unfinished:
            if run.status == "running":
                await self._runtime.db.runs.requeue(run.run_id)
            self.submit(run.run_id)
        if unfinished:
            logger.info("recovering %d unfinished runs", len(unfinished))
        return len(unfinished)

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def aclose(self) -> None:
        """Let in-flight runs reach a checkpoint and requeue themselves; cancel the late ones."""
        self._closed = True
        self._runtime.stopping.set()
        tasks = list(self._tasks.values())
        if not tasks:
            return
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

    async def _drive(self, run_id: str) -> None:
        try:
            status = await self._drive_until_reachable(run_id)
        except NotFound:
            # The thread was deleted while its run went on.
            logger.info("run %s ended: its thread is gone", run_id)
        except Exception:
            logger.exception("run %s could not be driven", run_id)
        else:
            logger.debug("run %s ended %s", run_id, status)

    async def _drive_until_reachable(self, run_id: str) -> str:
        """Drive the run; while the database is unreachable, retry with backoff until shutdown.

        An attempt cut short by the database leaves the run `running` (requeueing it needs the
        database too): it is requeued here before the next attempt.
        """
        backoff, interrupted = 0.5, False
        while True:
            try:
                if interrupted:
                    await self._runtime.db.runs.requeue(run_id)
                async with self._slots:
                    return await run_step(self._runtime, run_id)
            except DatabaseUnavailable as error:
                if self._closed:
                    raise  # the next start recovers it
                logger.warning("run %s waits for the database (%s)", run_id, error)
                interrupted = True
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
