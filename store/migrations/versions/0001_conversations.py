"""Conversations: the entries log and the records.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.schema import EntryId, UtcDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "conversation_entries",
        sa.Column("entry_id", EntryId(), nullable=False),
        sa.Column("parent_id", EntryId(), nullable=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("message", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("entry_id", name="pk_conversation_entries"),
    )
    op.create_table(
        "conversation_records",
        sa.Column("conversation_id", sa.String(255), nullable=False),
        sa.Column("scope", sa.String(255), nullable=True),
        sa.Column("family_id", sa.String(255), nullable=False),
        sa.Column("head_id", EntryId(), nullable=True),
        sa.Column("revision", sa.String(64), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.Column("usage", sa.LargeBinary(), nullable=False),
        sa.Column("deferred_tool_requests", sa.LargeBinary(), nullable=True),
        sa.Column("forked_from", sa.String(255), nullable=True),
        sa.Column("forked_at", EntryId(), nullable=True),
        sa.Column("branches", sa.LargeBinary(), nullable=False),
        sa.Column("format_version", sa.SmallInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["head_id"],
            ["conversation_entries.entry_id"],
            name="fk_conversation_records_head_id_conversation_entries",
        ),
        sa.PrimaryKeyConstraint("conversation_id", name="pk_conversation_records"),
    )
    op.create_index("ix_conversation_records_head_id", "conversation_records", ["head_id"])
    op.create_index("ix_conversation_records_family_id", "conversation_records", ["family_id"])
    op.create_index(
        "ix_conversation_records_scope_updated",
        "conversation_records",
        ["scope", "updated_at", "conversation_id"],
    )
    op.create_index(
        "ix_conversation_records_updated", "conversation_records", ["updated_at", "conversation_id"]
    )


def downgrade() -> None:
    op.drop_table("conversation_records")
    op.drop_table("conversation_entries")
