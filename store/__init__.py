"""The data layer: SQLAlchemy 2 async on SQLite or PostgreSQL, schema by Alembic."""

from __future__ import annotations

from .conversations import PageCursor, SqlConversationStore
from .errors import (
    Conflict,
    CorruptData,
    DatabaseUnavailable,
    NotFound,
    SchemaTooNew,
    StoreError,
    UnsupportedDatabase,
)
from .migrate import current_revision, head_revision, upgrade

__all__ = (
    "Conflict",
    "CorruptData",
    "DatabaseUnavailable",
    "NotFound",
    "PageCursor",
    "SchemaTooNew",
    "SqlConversationStore",
    "StoreError",
    "UnsupportedDatabase",
    "current_revision",
    "head_revision",
    "upgrade",
)
