"""agents: who answers a thread, and which agent asked for each held call

`threads.agent` is the agent a hand-off made the thread's speaker (null: the app's own agent);
`approvals.agent` and `approvals.path` say which delegated agent asked for a call, and the chain of
agents down to it (JSON, outermost first).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("threads") as batch:
        batch.add_column(sa.Column("agent", sa.String(length=255), nullable=True))
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("agent", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("path", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("path")
        batch.drop_column("agent")
    with op.batch_alter_table("threads") as batch:
        batch.drop_column("agent")
