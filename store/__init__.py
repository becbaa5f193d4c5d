"""The data layer: SQLAlchemy 2 async on SQLite or PostgreSQL, schema by Alembic.

Each name is imported on first use (PEP 562): a caller that needs only `StoreError` does not import
SQLAlchemy, Alembic and pydantic-ai.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .approvals import (
        Approval,
        Approvals,
        Decision,
        PendingCall,
        ReviewEventType,
        append_review_event,
        get_approval,
        insert_pending,
        review_data,
    )
    from .cancellations import cancel_run, newest_event_id
    from .checkpoints import Checkpoint
    from .conversations import AlsoWrite, PageCursor, Saving, SqlConversationStore
    from .database import Database
    from .engine import ConnectionOptions, insert_new, normalize_url, reader, translate_errors
    from .errors import (
        AlreadyDecided,
        ApprovalPending,
        CallsHeld,
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
    from .files import Files, NewFile, QuotaExceeded, StoredFile
    from .history_cache import CachedHistory, copied_every
    from .leases import Leases, Worker
    from .ledger import Execution, Ledger, idempotency_key
    from .migrate import current_revision, head_revision, run_environment, upgrade
    from .notifications import EVENTS_CHANNEL, EventListener, EventNotice
    from .pauses import Pause
    from .queueing import Claim, NewRun
    from .records import NewRecord, Record, Records
    from .retention import delegated_scope
    from .reviews import QueueCursor, QueueItem, ReviewEvent, Reviews
    from .run import Run
    from .runs import Claimed, Queued, Runs, StoredRevision, finish_run, insert_run, record_checkpoint
    from .schema import ApprovalStatus, RunKind, RunStatus, ThreadStatus, UtcDateTime, now_utc
    from .threads import Purge, Thread, ThreadCursor, Threads, touch_thread
    from .tracing import record_store_spans, recording_store_spans, run_trace_id
    from .webhooks import Delivery, DeliveryState, Webhooks

__all__ = (
    "EVENTS_CHANNEL",
    "AlreadyDecided",
    "AlsoWrite",
    "Approval",
    "ApprovalPending",
    "ApprovalStatus",
    "Approvals",
    "CachedHistory",
    "CallsHeld",
    "Checkpoint",
    "Claim",
    "Claimed",
    "Conflict",
    "ConnectionOptions",
    "CorruptData",
    "Database",
    "DatabaseUnavailable",
    "Decision",
    "Delivery",
    "DeliveryState",
    "EventListener",
    "EventLog",
    "EventNotice",
    "Execution",
    "Files",
    "LeaseLost",
    "Leases",
    "Ledger",
    "LoggedEvent",
    "NewEvent",
    "NewFile",
    "NewRecord",
    "NewRun",
    "NoActiveRun",
    "NotFound",
    "PageCursor",
    "Pause",
    "PendingCall",
    "Purge",
    "QueueCursor",
    "QueueItem",
    "Queued",
    "QuotaExceeded",
    "Record",
    "Records",
    "ReviewEvent",
    "ReviewEventType",
    "Reviews",
    "Run",
    "RunActive",
    "RunChanged",
    "RunKind",
    "RunStatus",
    "Runs",
    "Saving",
    "SchemaTooNew",
    "SqlConversationStore",
    "StoreError",
    "StoredFile",
    "StoredRevision",
    "Thread",
    "ThreadCursor",
    "ThreadStatus",
    "Threads",
    "UnsupportedDatabase",
    "UtcDateTime",
    "Webhooks",
    "Worker",
    "append_events",
    "append_review_event",
    "cancel_run",
    "copied_every",
    "current_revision",
    "delegated_scope",
    "finish_run",
    "get_approval",
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
    "review_data",
    "run_environment",
    "run_trace_id",
    "touch_thread",
    "translate_errors",
    "upgrade",
)

_EXPORTS = {
    "approvals": (
        "Approval",
        "Approvals",
        "Decision",
        "PendingCall",
        "ReviewEventType",
        "append_review_event",
        "get_approval",
        "insert_pending",
        "review_data",
    ),
    "cancellations": ("cancel_run", "newest_event_id"),
    "checkpoints": ("Checkpoint",),
    "conversations": ("AlsoWrite", "PageCursor", "Saving", "SqlConversationStore"),
    "database": ("Database",),
    "engine": ("ConnectionOptions", "insert_new", "normalize_url", "reader", "translate_errors"),
    "errors": (
        "AlreadyDecided",
        "ApprovalPending",
        "CallsHeld",
        "Conflict",
        "CorruptData",
        "DatabaseUnavailable",
        "LeaseLost",
        "NoActiveRun",
        "NotFound",
        "RunActive",
        "RunChanged",
        "SchemaTooNew",
        "StoreError",
        "UnsupportedDatabase",
    ),
    "events": ("EventLog", "LoggedEvent", "NewEvent", "append_events", "overwrite_events"),
    "files": ("Files", "NewFile", "QuotaExceeded", "StoredFile"),
    "history_cache": ("CachedHistory", "copied_every"),
    "leases": ("Leases", "Worker"),
    "ledger": ("Execution", "Ledger", "idempotency_key"),
    "migrate": ("current_revision", "head_revision", "run_environment", "upgrade"),
    "notifications": ("EVENTS_CHANNEL", "EventListener", "EventNotice"),
    "pauses": ("Pause",),
    "queueing": ("Claim", "NewRun"),
    "records": ("NewRecord", "Record", "Records"),
    "retention": ("delegated_scope",),
    "reviews": ("QueueCursor", "QueueItem", "ReviewEvent", "Reviews"),
    "run": ("Run",),
    "webhooks": ("Delivery", "DeliveryState", "Webhooks"),
    "runs": (
        "Claimed",
        "Queued",
        "Runs",
        "StoredRevision",
        "finish_run",
        "insert_run",
        "record_checkpoint",
    ),
    "schema": ("ApprovalStatus", "RunKind", "RunStatus", "ThreadStatus", "UtcDateTime", "now_utc"),
    "threads": ("Purge", "Thread", "ThreadCursor", "Threads", "touch_thread"),
    "tracing": ("record_store_spans", "recording_store_spans", "run_trace_id"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> object:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # The import statement's own path, which `python -X importtime` logs; `importlib.import_module`
    # would leave the module out of the log that start-up is measured with.
    module = __import__(_MODULE_OF[name], globals(), fromlist=(name,), level=1)
    value = globals()[name] = getattr(module, name)
    return value
