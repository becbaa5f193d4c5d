"""The data layer: SQLAlchemy 2 async on SQLite or PostgreSQL, schema by Alembic."""

from __future__ import annotations

from .approvals import Approval, Approvals, Decision, PendingCall, insert_pending
from .cancellations import cancel_run, newest_event_id
from .checkpoints import Checkpoint
from .conversations import AlsoWrite, PageCursor, SqlConversationStore
from .database import Database
from .engine import ConnectionOptions, insert_new, normalize_url, reader, translate_errors
from .errors import (
    AlreadyDecided,
    ApprovalPending,
    Conflict,
    CorruptData,
    DatabaseUnavailable,
    LeaseLost,
    NoActiveRun,
    NotFound,
    RunActive,
    RunChanged,
    SchemaTooNew,
    StoreError,
    UnsupportedDatabase,
)
from .events import EventLog, LoggedEvent, NewEvent, append_events, overwrite_events
from .leases import Leases, Worker
from .ledger import Execution, Ledger, idempotency_key
from .migrate import current_revision, head_revision, run_environment, upgrade
from .notifications import EVENTS_CHANNEL, EventListener, EventNotice
from .records import NewRecord, Record, Records
from .runs import Claimed, Queued, Run, Runs, StoredRevision, finish_run, insert_run, record_checkpoint
from .schema import ApprovalStatus, RunKind, RunStatus, ThreadStatus, UtcDateTime, now_utc
from .threads import Purge, Thread, ThreadCursor, Threads, touch_thread
from .tracing import record_store_spans, recording_store_spans, run_trace_id

__all__ = (
    "EVENTS_CHANNEL",
    "AlreadyDecided",
    "AlsoWrite",
    "Approval",
    "ApprovalPending",
    "ApprovalStatus",
    "Approvals",
    "Checkpoint",
    "Claimed",
    "Conflict",
    "ConnectionOptions",
    "CorruptData",
    "Database",
    "DatabaseUnavailable",
    "Decision",
    "EventListener",
    "EventLog",
    "EventNotice",
    "Execution",
    "LeaseLost",
    "Leases",
    "Ledger",
    "LoggedEvent",
    "NewEvent",
    "NewRecord",
    "NoActiveRun",
    "NotFound",
    "PageCursor",
    "PendingCall",
    "Purge",
    "Queued",
    "Record",
    "Records",
    "Run",
    "RunActive",
    "RunChanged",
    "RunKind",
    "RunStatus",
    "Runs",
    "SchemaTooNew",
    "SqlConversationStore",
    "StoreError",
    "StoredRevision",
    "Thread",
    "ThreadCursor",
    "ThreadStatus",
    "Threads",
    "UnsupportedDatabase",
    "UtcDateTime",
    "Worker",
    "append_events",
    "cancel_run",
    "current_revision",
    "finish_run",
    "head_revision",
    "idempotency_key",
    "insert_new",
    "insert_pending",
    "insert_run",
    "newest_event_id",
    "normalize_url",
    "now_utc",
    "overwrite_events",
    "reader",
    "record_checkpoint",
    "record_store_spans",
    "recording_store_spans",
    "run_environment",
    "run_trace_id",
    "touch_thread",
    "translate_errors",
    "upgrade",
)
