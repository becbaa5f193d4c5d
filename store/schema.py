"""The tables, declared once for the code and for Alembic.

Two deliberate choices, both for size and speed:

- Entry ids are UUIDs (pydantic-ai mints UUIDv7s), stored as 16 bytes: a native `uuid` on
  PostgreSQL, a 16-byte blob on SQLite, instead of 36 characters of text.
- Messages and the record's JSON fields are stored as the exact bytes pydantic's serializer
  produced (`bytea`/`blob`), so reading decodes them once, straight from the driver's buffer,
  with no JSON re-parsing by the database or the driver.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator, TypeEngine

__all__ = (
    "ACTIVE_RUN_STATUSES",
    "ApprovalRow",
    "ApprovalStatus",
    "Base",
    "ConversationEntryRow",
    "ConversationRecordRow",
    "EntryId",
    "EventRow",
    "FileBlobRow",
    "FileChunkRow",
    "FileGarbageRow",
    "FileRow",
    "InstructionsRow",
    "RecordRow",
    "RunKind",
    "RunRow",
    "RunStatus",
    "ThreadRow",
    "ThreadStatus",
    "ToolExecutionRow",
    "ToolExecutionStatus",
    "UtcDateTime",
    "active",
    "metadata",
    "status_is",
)

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class EntryId(TypeDecorator[str]):
    """A UUID given and returned as its canonical string, stored as 16 bytes."""

    impl = sa.LargeBinary(16)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(postgresql.UUID(as_uuid=False))
        return dialect.type_descriptor(sa.LargeBinary(16))

    def process_bind_param(self, value: str | None, dialect: Dialect) -> object:
        if value is None:
            return None
        if dialect.name == "postgresql":
            return value
        raw = bytes.fromhex(value.replace("-", ""))
        if len(raw) != 16:
            raise ValueError(f"{value!r} is not a UUID")
        return raw

    def process_result_value(self, value: object, dialect: Dialect) -> str | None:
        if value is None:
            return None
        if isinstance(value, bytes):
            # Formatting the hex by hand is several times faster than going through uuid.UUID,
            # which shows when a history of a thousand entries is read.
            h = value.hex()
            return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        return str(value)


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every dialect (SQLite keeps no offset of its own)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: durable-chat stores UTC timestamps only")
        return (
            value.astimezone(UTC)
            if dialect.name == "postgresql"
            else value.astimezone(UTC).replace(tzinfo=None)
        )

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = metadata


class ConversationEntryRow(Base):
    """One message of a conversation's log; entries are shared by forks and never updated."""

    __tablename__ = "conversation_entries"

    entry_id: Mapped[str] = mapped_column(EntryId(), primary_key=True)
    parent_id: Mapped[str | None] = mapped_column(EntryId())
    """The entry before this one. Deliberately no foreign key: checking one on delete would need an
    index on this column (a quarter of the table's size); the head's foreign key below is enough
    to stop a delete from releasing entries a concurrent fork points at."""
    kind: Mapped[str] = mapped_column(sa.String(16), default="message")
    message: Mapped[bytes] = mapped_column(sa.LargeBinary())
    instructions_id: Mapped[str | None] = mapped_column(sa.String(32))
    """The digest of the request's instructions, stored once in `conversation_instructions`; the
    message's bytes name it too (`store.instructions`). The index lets a purge find the unused ones."""

    __table_args__ = (
        sa.Index(
            "ix_conversation_entries_instructions",
            "instructions_id",
            sqlite_where=sa.text("instructions_id IS NOT NULL"),
            postgresql_where=sa.text("instructions_id IS NOT NULL"),
        ),
    )


class InstructionsRow(Base):
    """A request's instructions, stored once for every message that had them (`store.instructions`)."""

    __tablename__ = "conversation_instructions"

    instructions_id: Mapped[str] = mapped_column(sa.String(32), primary_key=True)
    """A digest of `text`: the first 16 bytes of its SHA-256, in hex."""
    text: Mapped[bytes] = mapped_column(sa.LargeBinary())
    """The instructions as a JSON string, as they stood in the message."""
    used_at: Mapped[datetime] = mapped_column(UtcDateTime())
    """When a writer last claimed them: a purge keeps them a day past it, however unused."""


class ConversationRecordRow(Base):
    """What a conversation carries besides its log: head, revision, usage, pending requests, scope."""

    __tablename__ = "conversation_records"

    conversation_id: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    scope: Mapped[str | None] = mapped_column(sa.String(255))
    family_id: Mapped[str] = mapped_column(sa.String(255), index=True)
    """The conversation at the root of its fork tree; its forks share its entries."""
    head_id: Mapped[str | None] = mapped_column(
        EntryId(), sa.ForeignKey("conversation_entries.entry_id"), index=True
    )
    revision: Mapped[str] = mapped_column(sa.String(64))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())
    usage: Mapped[bytes] = mapped_column(sa.LargeBinary())
    deferred_tool_requests: Mapped[bytes | None] = mapped_column(sa.LargeBinary())
    forked_from: Mapped[str | None] = mapped_column(sa.String(255))
    forked_at: Mapped[str | None] = mapped_column(EntryId())
    branches: Mapped[bytes] = mapped_column(sa.LargeBinary())
    format_version: Mapped[int] = mapped_column(sa.SmallInteger())

    __table_args__ = (
        # Listing a user's conversations, newest save first, with keyset pagination.
        sa.Index("ix_conversation_records_scope_updated", "scope", "updated_at", "conversation_id"),
        sa.Index("ix_conversation_records_updated", "updated_at", "conversation_id"),
    )


# -- threads, runs and their event log ---------------------------------------------------------

ThreadStatus = Literal["idle", "running", "awaiting_approval", "failed"]
RunKind = Literal["message", "resume", "recover", "regenerate"]
RunStatus = Literal["queued", "running", "awaiting_approval", "completed", "failed", "blocked", "cancelled"]
ApprovalStatus = Literal["pending", "approved", "rejected"]

ACTIVE_RUN_STATUSES = ("queued", "running")
"""A thread has at most one run in these states at a time (a partial unique index enforces it)."""


def status_is(column: sa.ColumnElement[str], *statuses: str) -> sa.ColumnElement[bool]:
    """`column IN ('a', 'b')` with the statuses written into the SQL, never bound parameters.

    A plan PostgreSQL makes once for every execution of a prepared statement (a generic plan) cannot
    match a partial index whose predicate names a parameter, nor know a parameter's status is rare:
    with parameters, the sweeps of `runs` would scan millions of finished runs (`test_generic_plans`).
    """
    if not all(status.isidentifier() for status in statuses):
        raise ValueError(f"not a status: {statuses!r}")
    literals = [sa.literal_column(f"'{status}'", sa.String()) for status in statuses]
    return column == literals[0] if len(literals) == 1 else column.in_(literals)


def active(column: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """`column IN ('queued', 'running')`, as the partial index on active runs says it (`status_is`)."""
    return status_is(column, *ACTIVE_RUN_STATUSES)


class ThreadRow(Base):
    """A user's chat thread; its messages are the conversation with the same id."""

    __tablename__ = "threads"

    thread_id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(sa.String(255))
    title: Mapped[str] = mapped_column(sa.String(200))
    status: Mapped[str] = mapped_column(sa.String(32))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())
    last_event_id: Mapped[int] = mapped_column(sa.BigInteger())
    """The last event id handed out; ids are allocated by advancing it, so never reused.

    A run reserves a block of ids at once, so this can be ahead of the newest stored event."""
    checkpoint_event_id: Mapped[int] = mapped_column(sa.BigInteger())
    """The newest event the stored messages reflect: events after it happened since the last checkpoint."""
    agent: Mapped[str | None] = mapped_column(sa.String(255))
    """The agent a hand-off made the thread's speaker; `None`: the app's own agent."""

    __table_args__ = (
        sa.Index("ix_threads_user_updated", "user_id", "updated_at", "thread_id"),
        # The purge: threads idle since a cutoff, a range of this index (`store.retention`).
        sa.Index("ix_threads_updated", "updated_at", "thread_id"),
    )


class RunRow(Base):
    """One agent run of a thread: a user message, a resume after decisions, a regenerated reply, or a recovery."""

    __tablename__ = "runs"

    run_id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    thread_id: Mapped[str] = mapped_column(
        sa.String(64), sa.ForeignKey("threads.thread_id", ondelete="CASCADE")
    )
    kind: Mapped[str] = mapped_column(sa.String(16))
    status: Mapped[str] = mapped_column(sa.String(32))
    content: Mapped[str | None] = mapped_column(sa.Text())
    """The user message a `message` (or `regenerate`) run answers."""
    file_ids: Mapped[str | None] = mapped_column(sa.Text())
    """The files attached to a `message` run's user message, as a JSON list of file ids; `NULL`: none."""
    idempotency_key: Mapped[str | None] = mapped_column(sa.String(255))
    error: Mapped[str | None] = mapped_column(sa.Text())
    attempt: Mapped[int] = mapped_column(sa.Integer())
    """How many times the run was started; more than once after a crash or a cancelled attempt."""
    checkpoints: Mapped[int] = mapped_column(sa.Integer())
    """How many checkpoints the run has written; 0 means it has changed nothing in the conversation yet."""
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    trace_id: Mapped[str | None] = mapped_column(sa.String(32))
    """The OpenTelemetry trace of the run's latest attempt (32 hex digits), to find its spans."""
    lease_owner: Mapped[str | None] = mapped_column(sa.String(64))
    """The worker driving the run while it is `running`; only it may checkpoint or end the run."""
    lease_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    """When the owner's lease lapses unless its heartbeat renews it; another worker may then take over."""
    events_compacted_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    """When the finished run's text deltas were dropped from the event log (`store.compaction`)."""

    __table_args__ = (
        sa.Index("ix_runs_thread_created", "thread_id", "created_at"),
        sa.Index("ix_runs_status", "status"),
        sa.UniqueConstraint("thread_id", "idempotency_key", name="uq_runs_thread_id_idempotency_key"),
        sa.Index(
            "uq_runs_one_active_per_thread",
            "thread_id",
            unique=True,
            sqlite_where=sa.text("status IN ('queued', 'running')"),
            postgresql_where=sa.text("status IN ('queued', 'running')"),
        ),
        # The finished runs whose events are still to compact, oldest first (`store.compaction`).
        sa.Index(
            "ix_runs_compactable",
            "finished_at",
            sqlite_where=sa.text("finished_at IS NOT NULL AND events_compacted_at IS NULL"),
            postgresql_where=sa.text("finished_at IS NOT NULL AND events_compacted_at IS NULL"),
        ),
    )


class EventRow(Base):
    """One stream event of a thread, kept for replay (`Last-Event-ID`)."""

    __tablename__ = "events"

    thread_id: Mapped[str] = mapped_column(
        sa.String(64), sa.ForeignKey("threads.thread_id", ondelete="CASCADE"), primary_key=True
    )
    event_id: Mapped[int] = mapped_column(sa.BigInteger(), primary_key=True, autoincrement=False)
    run_id: Mapped[str] = mapped_column(sa.String(64))
    type: Mapped[str] = mapped_column(sa.String(32))
    data: Mapped[bytes] = mapped_column(sa.LargeBinary())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


class ApprovalRow(Base):
    """A tool call waiting for (or given) a human decision, with who decided, when and how."""

    __tablename__ = "approvals"

    thread_id: Mapped[str] = mapped_column(
        sa.String(64), sa.ForeignKey("threads.thread_id", ondelete="CASCADE"), primary_key=True
    )
    tool_call_id: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    run_id: Mapped[str] = mapped_column(sa.String(64))
    """The run that paused for this call."""
    tool_name: Mapped[str] = mapped_column(sa.String(255))
    args: Mapped[bytes] = mapped_column(sa.LargeBinary())
    status: Mapped[str] = mapped_column(sa.String(16))
    override_args: Mapped[bytes | None] = mapped_column(sa.LargeBinary())
    reason: Mapped[str | None] = mapped_column(sa.Text())
    decided_by: Mapped[str | None] = mapped_column(sa.String(255))
    decided_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    resume_run_id: Mapped[str | None] = mapped_column(sa.String(64))
    """The run the completing decision started."""
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    trace_id: Mapped[str | None] = mapped_column(sa.String(32))
    """The trace of the run that paused for this call."""
    args_schema: Mapped[bytes | None] = mapped_column(sa.LargeBinary())
    """The JSON schema of the tool's arguments as the model saw it; edited arguments must fit it."""
    outcome: Mapped[str | None] = mapped_column(sa.String(16))
    """`unknown`: the call was started before and its process died before it finished; a human
    decides whether it runs again."""
    previous: Mapped[bytes | None] = mapped_column(sa.LargeBinary())
    """The earlier decision (JSON) of a call held again because its outcome became unknown."""
    call_metadata: Mapped[bytes | None] = mapped_column(sa.LargeBinary())
    """What the tool or the deferral said about the call for its reviewer (a JSON object), if anything."""
    agent: Mapped[str | None] = mapped_column(sa.String(255))
    """The delegated agent that asked for the call (or the speaking agent, in an app with hand-offs)."""
    path: Mapped[bytes | None] = mapped_column(sa.LargeBinary())
    """The chain of agents down to `agent` (a JSON list, outermost first)."""

    reviewers: Mapped[str] = mapped_column(sa.String(255), server_default="user")
    """Who may decide: `user` (the thread's user) or a role a reviewer's token holds."""
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    """When the server decides for nobody (`on_expiry`); `None`: the call waits for as long as it takes."""
    on_expiry: Mapped[bytes | None] = mapped_column(sa.LargeBinary())
    """What happens at `expires_at` (JSON): `{"action": "reject"}` or `{"action": "escalate", "to": role,
    "expires_after": seconds, "then": ...}`."""
    decided_role: Mapped[str | None] = mapped_column(sa.String(255))
    """The role the reviewer decided with; `None` for the thread's user or the server."""
    escalations: Mapped[bytes | None] = mapped_column(sa.LargeBinary())
    """The escalations before the decision (JSON list of `{"from", "to", "at", "expires_at"}`)."""

    __table_args__ = (
        sa.Index("ix_approvals_status_thread", "status", "thread_id"),
        sa.Index(
            "ix_approvals_review_queue", "status", "reviewers", "created_at", "thread_id", "tool_call_id"
        ),
        sa.Index("ix_approvals_deadline", "status", "expires_at"),
        # A reviewer's decided calls, newest decided first (`Reviews.queue`).
        sa.Index(
            "ix_approvals_decided",
            "reviewers",
            "decided_at",
            "thread_id",
            "tool_call_id",
            sqlite_where=sa.text("status <> 'pending'"),
            postgresql_where=sa.text("status <> 'pending'"),
        ),
    )


class ReviewEventRow(Base):
    """A change of the review queue (`approval_requested`, `_decided`, `_escalated`, `_expired`): the
    reviewers' stream and the webhooks' outbox, written in the transaction of the change."""

    __tablename__ = "review_events"

    event_id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    type: Mapped[str] = mapped_column(sa.String(32))
    thread_id: Mapped[str] = mapped_column(sa.String(64))
    """The thread of the call: deleting the thread deletes its review events (they hold its arguments)."""
    reviewers: Mapped[str] = mapped_column(sa.String(255))
    """Who may decide the call after the change (`user` or a role)."""
    data: Mapped[bytes] = mapped_column(sa.LargeBinary())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())

    __table_args__ = (sa.Index("ix_review_events_thread", "thread_id"),)


class WebhookDeliveryRow(Base):
    """One review event to POST to one endpoint, until it answers 2xx or its retries run out."""

    __tablename__ = "webhook_deliveries"

    event_id: Mapped[int] = mapped_column(sa.BigInteger(), primary_key=True, autoincrement=False)
    url: Mapped[str] = mapped_column(sa.String(2000), primary_key=True)
    attempts: Mapped[int] = mapped_column(sa.Integer())
    next_attempt_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    """`None` once delivered or given up."""
    delivered_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    last_error: Mapped[str | None] = mapped_column(sa.Text())

    __table_args__ = (
        sa.Index("ix_webhook_deliveries_due", "next_attempt_at"),
        # The outbox's pending and given-up deliveries (`Webhooks.undelivered`).
        sa.Index(
            "ix_webhook_deliveries_undelivered",
            "event_id",
            "url",
            sqlite_where=sa.text("delivered_at IS NULL"),
            postgresql_where=sa.text("delivered_at IS NULL"),
        ),
    )


ToolExecutionStatus = Literal["started", "succeeded", "failed", "retrying"]


class ToolExecutionRow(Base):
    """The exactly-once ledger of side-effecting tool calls: one row per call (`store.ledger`)."""

    __tablename__ = "tool_executions"

    thread_id: Mapped[str] = mapped_column(
        sa.String(64), sa.ForeignKey("threads.thread_id", ondelete="CASCADE"), primary_key=True
    )
    tool_call_id: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    run_id: Mapped[str] = mapped_column(sa.String(64))
    tool_name: Mapped[str] = mapped_column(sa.String(255))
    status: Mapped[str] = mapped_column(sa.String(16))
    """`started` (an external effect is under way, or its process died), `succeeded`, `failed`, or
    `retrying` (a reviewer decided to run a call whose outcome was unknown again)."""
    result: Mapped[bytes | None] = mapped_column(sa.LargeBinary())
    """The effect's result as JSON, once it succeeded."""
    error: Mapped[str | None] = mapped_column(sa.Text())
    """Why it failed, once it failed."""
    attempts: Mapped[int] = mapped_column(sa.Integer())
    """How many times the effect was started."""
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())


class RecordRow(Base):
    """A structured output a tool saved for its thread, one per tool call."""

    __tablename__ = "records"

    thread_id: Mapped[str] = mapped_column(
        sa.String(64), sa.ForeignKey("threads.thread_id", ondelete="CASCADE"), primary_key=True
    )
    tool_call_id: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    run_id: Mapped[str] = mapped_column(sa.String(64))
    kind: Mapped[str] = mapped_column(sa.String(64))
    data: Mapped[bytes] = mapped_column(sa.LargeBinary())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


# -- files (see docs/files.md) ------------------------------------------------------------------


class FileBlobRow(Base):
    """The bytes of a user's files, stored once per user and content (sha256), wherever the backend keeps them."""

    __tablename__ = "file_blobs"

    user_id: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    sha256: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    blob_key: Mapped[str] = mapped_column(sa.String(200), unique=True)
    """Where the backend keeps the bytes; new for every blob row, never reused."""
    size: Mapped[int] = mapped_column(sa.BigInteger())
    ready: Mapped[bool] = mapped_column(sa.Boolean())
    """The bytes are stored in full; until then no file may refer to the blob."""
    claimed_at: Mapped[datetime] = mapped_column(UtcDateTime())
    """When an upload last set out to store the bytes; a blob never made ready is garbage after a while."""


class FileRow(Base):
    """A file of a thread: its name and type, and the blob with its bytes (shared by identical files)."""

    __tablename__ = "files"

    file_id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    thread_id: Mapped[str] = mapped_column(
        sa.String(64), sa.ForeignKey("threads.thread_id", ondelete="CASCADE")
    )
    user_id: Mapped[str] = mapped_column(sa.String(255))
    sha256: Mapped[str] = mapped_column(sa.String(64))
    name: Mapped[str] = mapped_column(sa.String(255))
    media_type: Mapped[str] = mapped_column(sa.String(100))
    size: Mapped[int] = mapped_column(sa.BigInteger())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())

    __table_args__ = (
        # A blob is deleted only when no file refers to it; the key stops a race from deleting one in use.
        sa.ForeignKeyConstraint(
            ["user_id", "sha256"],
            ["file_blobs.user_id", "file_blobs.sha256"],
            name="fk_files_user_id_sha256_file_blobs",
        ),
        sa.Index("ix_files_thread_created", "thread_id", "created_at"),
        sa.Index("ix_files_user_sha256", "user_id", "sha256"),
    )


class FileChunkRow(Base):
    """A piece of a blob's bytes when the database stores them (the default backend)."""

    __tablename__ = "file_chunks"

    blob_key: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    offset: Mapped[int] = mapped_column(sa.BigInteger(), primary_key=True, autoincrement=False)
    data: Mapped[bytes] = mapped_column(sa.LargeBinary())


class FileGarbageRow(Base):
    """A blob whose row is gone and whose bytes are still to be deleted from the backend."""

    __tablename__ = "file_garbage"

    blob_key: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


def now_utc() -> datetime:
    """The current time, timezone-aware in UTC, as every timestamp column stores it."""
    return datetime.now(UTC)
