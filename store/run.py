"""`Run`: one agent run of a thread as stored, from queued to its end."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from .schema import RunKind, RunStatus

__all__ = ("Run",)


@dataclass(frozen=True)
class Run:
    """One run of a thread, as its row stores it."""

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
