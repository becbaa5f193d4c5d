"""the demo shop's orders, accounts and FAQ answers

Revision ID: shop_0001
Revises:
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store import UtcDateTime

revision = "shop_0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "shop_orders",
        sa.Column("order_id", sa.String(length=32), nullable=False),
        sa.Column("item", sa.String(length=255), nullable=False),
        sa.Column("quantity", sa.Integer(), nullable=False),
        sa.Column("total_cents", sa.Integer(), nullable=False),
        sa.Column(
            "status",
            sa.String(length=32),
            nullable=False,
            comment="processing, shipped, delivered or cancelled",
        ),
        sa.Column("tracking", sa.String(length=64), nullable=True),
        sa.Column("refunded_cents", sa.Integer(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("order_id", name=op.f("pk_shop_orders")),
    )
    op.create_table(
        "shop_accounts",
        sa.Column("email", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("plan", sa.String(length=32), nullable=False),
        sa.Column("member_since", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("email", name=op.f("pk_shop_accounts")),
    )
    op.create_table(
        "shop_faqs",
        sa.Column("topic", sa.String(length=64), nullable=False),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("topic", name=op.f("pk_shop_faqs")),
    )


def downgrade() -> None:
    op.drop_table("shop_faqs")
    op.drop_table("shop_accounts")
    op.drop_table("shop_orders")
