"""Compaction of the event log: a finished run's text deltas go once no client can need them.

A run's `text_delta` events repeat, piece by piece, what its `text_done` events hold whole (and the
conversation holds too). A client following the run live needs them; once the run has finished,
a page reloads the thread from its messages and follows from the checkpoint's event id
(`messages_event_id`), and a client resuming with a `Last-Event-ID` inside the run finishes each
part from its `text_done`. So a run finished longer than the replay window ago loses its deltas;
every other event is kept. `runs.events_compacted_at` marks the runs done, and a partial index on
the finished runs not yet compacted finds the next ones, however many runs there are.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from .engine import translate_errors
from .schema import EventRow, RunRow, metadata, now_utc, status_is

__all__ = ("COMPACTED_TYPES", "compact_events")

COMPACTED_TYPES = ("text_delta",)
"""The events a finished run loses past the replay window: each part's `text_done` holds them whole."""

_runs = metadata.tables[RunRow.__tablename__]
_events = metadata.tables[EventRow.__tablename__]


async def compact_events(engine: AsyncEngine, finished_before: datetime, *, limit: int) -> tuple[int, int]:
    """Drop the text deltas of up to `limit` runs finished before `finished_before`, oldest first,
    in one transaction; return how many runs were compacted and how many events deleted."""
    runs = _runs.c
    with translate_errors("compacting the event log"):
        async with engine.begin() as connection:
            picked = (
                sa.select(runs.run_id, runs.thread_id)
                .where(
                    runs.finished_at.is_not(None),
                    runs.events_compacted_at.is_(None),
                    runs.finished_at < finished_before,
                )
                .order_by(runs.finished_at)
                .limit(limit)
            )
            if connection.dialect.name == "postgresql":
                # Workers compacting at once skip each other's runs instead of waiting on them.
                picked = picked.with_for_update(skip_locked=True)
            rows: list[tuple[str, str]] = [(row[0], row[1]) for row in await connection.execute(picked)]
            if not rows:
                return 0, 0
            deleted = 0
            for run_id, thread_id in rows:
                # The thread's events by their primary key's prefix; a run's are a stretch of them.
                result = await connection.execute(
                    _events.delete().where(
                        _events.c.thread_id == thread_id,
                        _events.c.run_id == run_id,
                        status_is(_events.c.type, *COMPACTED_TYPES),
                    )
                )
                deleted += result.rowcount
            await connection.execute(
                _runs.update()
                .where(runs.run_id.in_([run_id for run_id, _ in rows]))
                .values(events_compacted_at=now_utc())
            )
    return len(rows), deleted
