"""the generic exactly-once ledger; argument schemas and unknown outcomes on approvals; no shop tables

The demo shop's tables (orders, accounts, faqs) leave the core schema: the shop ships them as an
app's own migrations (`agent/demo/migrations`), which create them again when the shop is served.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.schema import UtcDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_SHOP_TABLES = ("orders", "accounts", "faqs")


def upgrade() -> None:
    with op.batch_alter_table("tool_executions") as batch:
        batch.add_column(
            sa.Column("status", sa.String(length=16), nullable=False, server_default="succeeded")
        )
        batch.add_column(sa.Column("error", sa.Text(), nullable=True))
        batch.add_column(sa.Column("attempts", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("updated_at", UtcDateTime(), nullable=True))
        batch.alter_column("result", existing_type=sa.LargeBinary(), nullable=True)
    op.execute("UPDATE tool_executions SET updated_at = created_at")
    with op.batch_alter_table("tool_executions") as batch:
        batch.alter_column("updated_at", existing_type=UtcDateTime(), nullable=False)
        batch.alter_column("status", existing_type=sa.String(length=16), server_default=None)
        batch.alter_column("attempts", existing_type=sa.Integer(), server_default=None)
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("args_schema", sa.LargeBinary(), nullable=True))
        batch.add_column(sa.Column("outcome", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("previous", sa.LargeBinary(), nullable=True))
    for table in _SHOP_TABLES:
        op.execute(f"DROP TABLE IF EXISTS {table}")


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("previous")
        batch.drop_column("outcome")
        batch.drop_column("args_schema")
    op.execute("DELETE FROM tool_executions WHERE result IS NULL")
    with op.batch_alter_table("tool_executions") as batch:
        batch.alter_column("result", existing_type=sa.LargeBinary(), nullable=False)
        batch.drop_column("updated_at")
        batch.drop_column("attempts")
        batch.drop_column("error")
        batch.drop_column("status")
