"""review: who decides a held call (the user or a role), its deadline, what happens at it, the audit

`reviewers` is `user` or a role; `expires_at` the deadline the server enforces; `on_expiry` what it
does then (JSON: reject, or escalate to a role with a new deadline); `decided_role` the role a
reviewer decided with; `escalations` the escalations before the decision (JSON list). Two indexes:
the review queue (by status, reviewers and age) and the deadline sweep (pending by deadline).
`review_events` is the reviewers' stream and the webhooks' outbox; `webhook_deliveries` tracks
each event's delivery to each endpoint.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.schema import UtcDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("reviewers", sa.String(length=255), nullable=False, server_default="user"))
        batch.add_column(sa.Column("expires_at", UtcDateTime(), nullable=True))
        batch.add_column(sa.Column("on_expiry", sa.LargeBinary(), nullable=True))
        batch.add_column(sa.Column("decided_role", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("escalations", sa.LargeBinary(), nullable=True))
    op.create_index(
        "ix_approvals_review_queue",
        "approvals",
        ["status", "reviewers", "created_at", "thread_id", "tool_call_id"],
    )
    op.create_index("ix_approvals_deadline", "approvals", ["status", "expires_at"])
    op.create_table(
        "review_events",
        sa.Column(
            "event_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
            autoincrement=True,
        ),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("thread_id", sa.String(length=64), nullable=False),
        sa.Column("reviewers", sa.String(length=255), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_review_events")),
    )
    op.create_index("ix_review_events_thread", "review_events", ["thread_id"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", UtcDateTime(), nullable=True),
        sa.Column("delivered_at", UtcDateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("event_id", "url", name=op.f("pk_webhook_deliveries")),
    )
    op.create_index("ix_webhook_deliveries_due", "webhook_deliveries", ["next_attempt_at"])


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_due", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_index("ix_review_events_thread", table_name="review_events")
    op.drop_table("review_events")
    op.drop_index("ix_approvals_deadline", table_name="approvals")
    op.drop_index("ix_approvals_review_queue", table_name="approvals")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("escalations")
        batch.drop_column("decided_role")
        batch.drop_column("on_expiry")
        batch.drop_column("expires_at")
        batch.drop_column("reviewers")
