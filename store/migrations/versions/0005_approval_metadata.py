"""approval metadata: what a tool said about a call it held for a decision

`ApprovalRequired(metadata=...)` and pydantic-ai's per-call metadata of deferred requests, kept as
a JSON object with the call.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("call_metadata", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("call_metadata")
