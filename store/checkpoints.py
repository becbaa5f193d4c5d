"""A run's checkpoint: its records, its events and its bookkeeping, in the save's one trip.

A checkpoint is data (`Checkpoint`), not a callback: the conversation store writes it with the
conversation on statements compiled once (`compiled.py`). On SQLite it is part of the save's one
function on aiosqlite's thread (`dialects/sqlite.py`); on PostgreSQL, CTEs of the save's one
statement, which refuses itself (`refusals.py`) when a guard fails, so that nothing of it is
stored (`dialects/postgresql.py`). The design note is "A checkpoint's trip" in `docs/store.md`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from .errors import CallsHeld, LeaseLost, NotFound
from .event_rows import NOW, THREAD_ID, NewEvent, event_values
from .pauses import Pause, pause_values
from .records import NewRecord
from .refusals import Refusal
from .run import Run
from .schema import RecordRow, RunRow, RunStatus, ThreadRow, ThreadStatus, metadata, now_utc

__all__ = (
    "COUNT_RUN",
    "RECORD_COLUMNS",
    "RUN_EXISTS",
    "RUN_ID",
    "TOUCH_THREAD",
    "Checkpoint",
    "json_bytes",
    "raise_refusal",
    "thread_status_after",
)

_runs = metadata.tables[RunRow.__tablename__]
_threads = metadata.tables[ThreadRow.__tablename__]
_records = metadata.tables[RecordRow.__tablename__]


def thread_status_after(status: RunStatus) -> ThreadStatus:
    """The status a thread takes when its run takes `status`."""
    match status:
        case "queued" | "running":
            return "running"
        case "awaiting_approval":
            return "awaiting_approval"
        case "failed":
            return "failed"
        case "completed" | "blocked" | "cancelled":
            return "idle"


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """What a run's checkpoint writes besides its conversation, in the same transaction.

    The checkpoint is counted (and the run ended with `finish`) only while `run.lease_owner` holds
    the run running; the thread records `event_id`, the newest event the stored messages reflect.
    """

    run: Run
    event_id: int | None
    """`None`: the thread's own messages are not in the checkpoint (a delegated sub-run's), its mark stays."""
    records: Sequence[NewRecord] = ()
    """Records the run's tools made; a tool call's record stored already is kept."""
    events: Sequence[tuple[int, NewEvent]] = ()
    """Events whose ids were reserved; on PostgreSQL other processes are notified of them."""
    finish: RunStatus | None = None
    error: str | None = None
    trace_id: str | None = None
    """The trace of the run's attempt, kept on its row (a run claimed as it was queued has none yet)."""
    pause: Pause | None = None
    """The calls the run's end holds for decisions, with their review log rows (`pauses.py`)."""
    now: datetime = field(default_factory=now_utc)

    def values(self, *, postgres: bool) -> dict[str, Any]:
        """The bind values of the checkpoint's statements, by name (on SQLite, without the rows)."""
        run = self.run
        values = event_values(run.thread_id, self.events, postgres=postgres) | {
            "c_now": self.now,
            "c_run_id": run.run_id,
            "c_owner": run.lease_owner,
            "c_event_id": self.event_id,
            "c_finish": self.finish,
            "c_error": self.error,
            "c_thread_status": None if self.finish is None else thread_status_after(self.finish),
            "c_trace_id": self.trace_id,
        }
        if postgres:
            values |= {
                "r_tool_call_ids": [record.tool_call_id for record in self.records],
                "r_kinds": [record.kind for record in self.records],
                "r_datas": [json_bytes(record.data) for record in self.records],
            }
            if self.pause is not None:
                values |= pause_values(self.pause, values)
        return values


def json_bytes(data: dict[str, object]) -> bytes:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def raise_refusal(reason: Refusal, checkpoint: Checkpoint) -> None:
    """Raise what `reason` means for the run (a conflict is the caller's to raise)."""
    run = checkpoint.run
    match reason:
        case "no run":
            # Gone with its thread, deleted meanwhile: failing rolls back what the checkpoint saved.
            raise NotFound(f"no run {run.run_id!r}: its thread {run.thread_id!r} was deleted")
        case "lease lost":
            raise LeaseLost(f"run {run.run_id!r} is no longer held by worker {run.lease_owner!r}")
        case "no thread":
            # Deleted meanwhile: failing rolls back the conversation saved with this checkpoint.
            raise NotFound(f"no thread {run.thread_id!r}")
        case "held":
            raise CallsHeld(
                f"a call run {run.run_id!r} pauses for is held already in thread {run.thread_id!r}"
            )
        case _:
            pass  # a conflict: the caller's to raise


# -- the statements both databases run (their own are in `dialects/`) -----------------------------------------------------------------------------

FINISH = sa.bindparam("c_finish", type_=sa.String())
RUN_ID = sa.bindparam("c_run_id", type_=sa.String())
COUNT_RUN = (
    _runs.update()
    .where(
        _runs.c.run_id == RUN_ID,
        _runs.c.lease_owner.is_not_distinct_from(sa.bindparam("c_owner", type_=sa.String())),
        _runs.c.status == "running",
    )
    .values(
        checkpoints=_runs.c.checkpoints + 1,
        trace_id=sa.func.coalesce(sa.bindparam("c_trace_id", type_=sa.String()), _runs.c.trace_id),
        status=sa.func.coalesce(FINISH, _runs.c.status),
        error=sa.case((FINISH.is_(None), _runs.c.error), else_=sa.bindparam("c_error", type_=sa.Text())),
        finished_at=sa.case((FINISH.is_(None), _runs.c.finished_at), else_=NOW),
    )
)
RUN_EXISTS = sa.select(_runs.c.run_id).where(_runs.c.run_id == RUN_ID)
TOUCH_THREAD = (
    _threads.update()
    .where(_threads.c.thread_id == THREAD_ID)
    .values(
        checkpoint_event_id=sa.func.coalesce(
            sa.bindparam("c_event_id", type_=sa.BigInteger()), _threads.c.checkpoint_event_id
        ),
        updated_at=NOW,
        status=sa.func.coalesce(sa.bindparam("c_thread_status", type_=sa.String()), _threads.c.status),
    )
)
RECORD_COLUMNS = ["thread_id", "tool_call_id", "run_id", "kind", "data", "created_at"]
