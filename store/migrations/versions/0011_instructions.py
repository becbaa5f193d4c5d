"""instructions: a request's instructions stored once, named by digest from its entry

`conversation_instructions` holds each distinct text once; `conversation_entries.instructions_id`
names the one an entry's message had (its bytes name it too), indexed so a purge finds the texts
no entry names any more. Entries written before keep their instructions inline and load as before.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.schema import UtcDateTime

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_NAMED = sa.text("instructions_id IS NOT NULL")


def upgrade() -> None:
    op.create_table(
        "conversation_instructions",
        sa.Column("instructions_id", sa.String(32), nullable=False),
        sa.Column("text", sa.LargeBinary(), nullable=False),
        sa.Column("used_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("instructions_id", name="pk_conversation_instructions"),
    )
    with op.batch_alter_table("conversation_entries") as batch:
        batch.add_column(sa.Column("instructions_id", sa.String(32), nullable=True))
    op.create_index(
        "ix_conversation_entries_instructions",
        "conversation_entries",
        ["instructions_id"],
        sqlite_where=_NAMED,
        postgresql_where=_NAMED,
    )


def downgrade() -> None:
    op.drop_index("ix_conversation_entries_instructions", table_name="conversation_entries")
    with op.batch_alter_table("conversation_entries") as batch:
        batch.drop_column("instructions_id")
    op.drop_table("conversation_instructions")
