"""The demo shop's own tables, declared once for its code and its migrations."""

from __future__ import annotations

import sqlalchemy as sa

from store import UtcDateTime

__all__ = ("accounts", "faqs", "metadata", "orders")

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

orders = sa.Table(
    "shop_orders",
    metadata,
    sa.Column("order_id", sa.String(32), primary_key=True),
    sa.Column("item", sa.String(255), nullable=False),
    sa.Column("quantity", sa.Integer(), nullable=False),
    sa.Column("total_cents", sa.Integer(), nullable=False),
    sa.Column("status", sa.String(32), nullable=False, comment="processing, shipped, delivered or cancelled"),
    sa.Column("tracking", sa.String(64)),
    sa.Column("refunded_cents", sa.Integer(), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
)
accounts = sa.Table(
    "shop_accounts",
    metadata,
    sa.Column("email", sa.String(255), primary_key=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("plan", sa.String(32), nullable=False),
    sa.Column("member_since", sa.Integer(), nullable=False),
)
faqs = sa.Table(
    "shop_faqs",
    metadata,
    sa.Column("topic", sa.String(64), primary_key=True),
    sa.Column("answer", sa.Text(), nullable=False),
)
