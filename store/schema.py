"""The tables, declared once for the code and for Alembic.

Two deliberate choices, both for size and speed:

- Entry ids are UUIDs (pydantic-ai mints UUIDv7s), stored as 16 bytes: a native `uuid` on
  PostgreSQL, a 16-byte blob on SQLite, instead of 36 characters of text.
- Messages and the record's JSON fields are stored as the exact bytes pydantic's serializer
  produced (`bytea`/`blob`), so reading decodes them once, straight from the driver's buffer,
  with no JSON re-parsing by the database or the driver.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator, TypeEngine

__all__ = ("Base", "ConversationEntryRow", "ConversationRecordRow", "EntryId", "UtcDateTime", "metadata")

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
        parsed = uuid.UUID(value)
        return str(parsed) if dialect.name == "postgresql" else parsed.bytes

    def process_result_value(self, value: object, dialect: Dialect) -> str | None:
        if value is None:
            return None
        if isinstance(value, bytes):
            return str(uuid.UUID(bytes=value))
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
