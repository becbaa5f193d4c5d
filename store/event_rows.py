"""A thread's events as both databases store them: the event to store, its bind values, the run's fence."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from .schema import RunRow, UtcDateTime, metadata, now_utc

__all__ = ("HELD", "NOW", "THREAD_ID", "NewEvent", "event_values")

_runs = metadata.tables[RunRow.__tablename__]


@dataclass(frozen=True)
class NewEvent:
    """An event to append: its run, type name and JSON data."""

    run_id: str
    type: str
    data: bytes


NOW = sa.bindparam("c_now", type_=UtcDateTime())
"""The time the unit of work stores its rows with."""
THREAD_ID = sa.bindparam("c_thread_id", type_=sa.String())


def event_values(thread_id: str, events: Sequence[tuple[int, Any]], *, postgres: bool) -> dict[str, Any]:
    """The bind values that store `events` (`(event_id, NewEvent)`), but the rows on SQLite (`sqlite_rows`)."""
    newest = max((event_id for event_id, _ in events), default=None)
    values: dict[str, Any] = {
        "c_thread_id": thread_id,
        "c_now": now_utc(),
        "c_notice": None if newest is None else f"{thread_id} {newest}",
    }
    if postgres:
        values |= {
            "e_event_ids": [event_id for event_id, _ in events],
            "e_run_ids": [event.run_id for _, event in events],
            "e_types": [event.type for _, event in events],
            "e_datas": [event.data for _, event in events],
        }
    return values


HELD = (
    sa.select(_runs.c.lease_owner)
    .where(_runs.c.run_id == sa.bindparam("h_run_id", type_=sa.String()))
    .with_for_update(read=True)
)
