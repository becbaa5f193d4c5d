"""Cancelling a run: its end as `cancelled`, fenced against the worker that was driving it.

The agent layer decides what of the run to keep (see `agent.cancellation`) and stores it in the
same unit of work as `cancel_run`, which ends the run. Ending it is what fences the driver off:
the run is no longer `running` and nobody holds its lease, so every later write of that worker (a
checkpoint, its end, its events) rolls back (`store.LeaseLost`).
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from .errors import RunChanged
from .events import LoggedEvent, NewEvent, append_events
from .schema import EventRow, RunRow, ThreadRow, active, metadata, now_utc

__all__ = ("cancel_run", "newest_event_id")

_runs = metadata.tables[RunRow.__tablename__]
_events = metadata.tables[EventRow.__tablename__]
_threads = metadata.tables[ThreadRow.__tablename__]


async def newest_event_id(connection: AsyncConnection, thread_id: str) -> int:
    """The id of the thread's newest stored event, 0 when it has none."""
    value = (
        await connection.execute(
            sa.select(sa.func.max(_events.c.event_id)).where(_events.c.thread_id == thread_id)
        )
    ).scalar_one_or_none()
    return value or 0


async def cancel_run(
    connection: AsyncConnection,
    thread_id: str,
    run_id: str,
    *,
    seen_event_id: int,
    event: Callable[[str | None], NewEvent],
) -> LoggedEvent:
    """End the run `run_id` as `cancelled` inside the caller's unit of work, and log its last event.

    The caller read the run's state up to the event `seen_event_id` and stores what it keeps in the
    same unit of work; `event(trace_id)` is the run's closing event, given the run's trace. The
    thread becomes idle, its stored messages reflecting everything up to that event.

    Raises:
        RunChanged: The run is no longer queued or running, or the thread has events after
            `seen_event_id`: what the caller read is stale, and its unit of work must roll back.
    """
    # The first write on the run's row: a driver's write holding the row waits for its commit
    # first (its events are then seen below); one arriving after waits for this commit and fails.
    ended = (
        await connection.execute(
            _runs.update()
            .where(_runs.c.run_id == run_id, active(_runs.c.status))
            # Nobody holds it any more: the driver's next write of any kind is fenced off (`leases.py`).
            .values(
                status="cancelled", finished_at=now_utc(), error=None, lease_owner=None, lease_expires_at=None
            )
            .returning(_runs.c.trace_id)
        )
    ).one_or_none()
    if ended is None:
        raise RunChanged(f"run {run_id!r} ended before it could be cancelled")
    if await newest_event_id(connection, thread_id) != seen_event_id:
        raise RunChanged(f"run {run_id!r} went on while it was being cancelled")
    [logged] = await append_events(connection, thread_id, [event(ended[0])])
    await connection.execute(
        _threads.update()
        .where(_threads.c.thread_id == thread_id)
        .values(status="idle", checkpoint_event_id=logged.event_id)
    )
    return logged
