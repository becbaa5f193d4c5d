"""Queueing a run in one trip: the thread's UPDATE that reads what refuses one, then its INSERT.

The UPDATE comes first and serializes the thread's writers (its row lock on PostgreSQL, the
write lock on SQLite); its RETURNING reads what may refuse the run and, for a rate limit, the
user's recent messages. The INSERT may create the run claimed by a worker and started. See
"Queueing a run is one trip" in `docs/store.md`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine

from .compiled import checked_out, executed, per_dialect
from .dialects import postgresql, sqlite
from .events import NewEvent
from .files import StoredFile
from .leases import Worker
from .queue_statements import QueueOutcome, QueueStatements, Refusals, mark
from .schema import RunKind, now_utc
from .threads import title_from

__all__ = ("Claim", "NewRun", "Refusals", "queue")


@dataclass(frozen=True, kw_only=True)
class NewRun:
    """A run to queue: its thread, what it answers, and what may find or make the thread."""

    thread_id: str
    kind: RunKind
    """`message` or `regenerate`; a `resume` run is queued by a decision (`Approvals.decide`)."""
    content: str
    idempotency_key: str | None = None
    """The same key again returns the run it queued the first time."""
    run_id: str | None = None
    """The new run's id (else a new one): its opening events name it before it exists."""
    user_id: str | None = None
    """Only a thread of this user is found: another user's is missing, as a request that needs no
    read of the thread to check whose it is wants."""
    create_unless: str | None = None
    """With `user_id`: a missing thread is created as theirs (a chat's first message makes its
    thread in the same trip), unless this is the id of a thread of theirs (then missing)."""
    file_ids: Sequence[str] = ()
    """The files attached to a `message` run's user message (`Run.attached`)."""


@dataclass(frozen=True, kw_only=True)
class Claim:
    """The run is created claimed by this worker and started, as `Runs.start_reserving` would."""

    events: int
    """How many event ids are reserved for the run."""
    count_window: timedelta | None = None
    """The user's messages within this window, across their threads, are counted (for a rate limit)."""
    opening: Sequence[NewEvent] = ()
    """The run's first events, stored with it from the first reserved id on."""
    attached: Sequence[StoredFile] = ()
    """The files the message attaches, as the caller read them: not stored, handed to the run (`Claimed.attached`)."""


@dataclass(frozen=True)
class _Shape:
    """Which variant of the statements a queueing runs: what it binds, reads and writes."""

    keyed: bool
    """An idempotency key finds the run it queued before."""
    counting: bool
    """The user's recent messages are counted."""
    claiming: bool
    """The run is inserted claimed and started, event ids reserved."""
    titled: bool
    """An untitled thread takes its title from the message."""
    owned: bool
    """Only a thread of the given user is found."""
    opening: bool
    """The run's opening events are stored with it."""
    creating: bool
    """A missing thread is created."""


@per_dialect
def _statements(dialect: Dialect, shape: _Shape) -> QueueStatements:
    claiming, opening = shape.claiming, shape.opening
    marking = mark(
        keyed=shape.keyed,
        counting=shape.counting,
        claiming=claiming,
        titled=shape.titled,
        owned=shape.owned,
        creating=dialect.name if shape.creating else None,
    )
    if dialect.name == "postgresql":
        return postgresql.queue_statements(dialect, marking, claiming=claiming, opening=opening)
    return sqlite.queue_statements(dialect, marking, claiming=claiming, opening=opening)


async def queue(
    engine: AsyncEngine, new: NewRun, claim: Claim | None = None, *, worker: Worker | None = None
) -> QueueOutcome:
    """Mark the thread running and insert the run in one trip, unless refused; with `claim` and
    `worker`, the run is claimed by `worker` and started.

    With `new.user_id`, a thread of another user is refused as `no thread`, as a missing one is;
    with `new.create_unless` too, a missing thread is created (theirs), unless `create_unless` is
    the id of a thread of theirs (then refused as `no thread`, nothing written). The claim's
    opening events are stored from the first id it reserves (unclaimed, they are not stored).

    Returns why it was refused (and nothing was written), what the thread's UPDATE read (on SQLite
    also when refused, on PostgreSQL only when not), and the inserted run's row.

    Raises:
        sqlalchemy.exc.IntegrityError: A concurrent run, or run of the same key, won the race.
    """
    kind, content, user_id = new.kind, new.content, new.user_id
    claiming = worker is not None and claim is not None
    window = None if claim is None else claim.count_window
    count_since = None if window is None or not claiming else now_utc() - window
    claim_events = None if claim is None else claim.events
    opening = () if claim is None else claim.opening
    title = title_from(content) if kind == "message" else ""
    opened = claiming and bool(opening)
    shape = _Shape(
        keyed=new.idempotency_key is not None,
        counting=count_since is not None,
        claiming=claiming,
        titled=bool(title),
        owned=user_id is not None,
        opening=opened,
        creating=new.create_unless is not None and user_id is not None,
    )
    dialect = engine.dialect
    statements = _statements(dialect, shape)
    now = now_utc()
    lease = worker.lease if worker is not None else timedelta(0)
    values: dict[str, Any] = {
        "q_thread_id": new.thread_id,
        "q_user_id": user_id,
        "q_now": now,
        "q_title": title,
        "q_claim": claim_events,
        "q_key": new.idempotency_key,
        "q_since": count_since,
        "q_run_id": new.run_id or str(uuid.uuid4()),
        "q_kind": kind,
        "q_status": "running" if claiming else "queued",
        "q_content": content,
        "q_file_ids": json.dumps(list(new.file_ids)) if new.file_ids else None,
        "q_attempt": 1 if claiming else 0,
        "q_started": now if claiming else None,
        "q_owner": worker.worker_id if worker is not None and claiming else None,
        "q_expires": now + lease if claiming else None,
        "q_lease": lease,
        "q_unless": new.create_unless,
        "o_types": [event.type for event in opening] if opened else None,
        "o_datas": [event.data for event in opening] if opened else None,
    }
    ran: list[str] = []
    try:
        if dialect.name == "postgresql":
            return await checked_out(
                engine, statements.mark.sql, postgresql.queue_trip, statements, values, ran
            )
        return await checked_out(
            engine, statements.mark.sql, sqlite.queue_trip, statements, values, opening, ran
        )
    finally:
        executed(*ran)
