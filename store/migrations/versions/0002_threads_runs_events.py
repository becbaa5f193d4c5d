"""threads, runs, events, approvals, ledger, records, demo data

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.schema import UtcDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "accounts",
        sa.Column("email", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("plan", sa.String(length=32), nullable=False),
        sa.Column("member_since", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("email", name=op.f("pk_accounts")),
    )
    op.create_table(
        "faqs",
        sa.Column("topic", sa.String(length=64), nullable=False),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("topic", name=op.f("pk_faqs")),
    )
    op.create_table(
        "orders",
        sa.Column("order_id", sa.String(length=32), nullable=False),
        sa.Column("item", sa.String(length=255), nullable=False),
        sa.Column("quantity", sa.Integer(), nullable=False),
        sa.Column("total_cents", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("tracking", sa.String(length=64), nullable=True),
        sa.Column("refunded_cents", sa.Integer(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("order_id", name=op.f("pk_orders")),
    )
    op.create_table(
        "threads",
        sa.Column("thread_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.Column("last_event_id", sa.BigInteger(), nullable=False),
        sa.Column("checkpoint_event_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("thread_id", name=op.f("pk_threads")),
    )
    with op.batch_alter_table("threads", schema=None) as batch_op:
        batch_op.create_index("ix_threads_user_updated", ["user_id", "updated_at", "thread_id"], unique=False)

    op.create_table(
        "approvals",
        sa.Column("thread_id", sa.String(length=64), nullable=False),
        sa.Column("tool_call_id", sa.String(length=255), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("tool_name", sa.String(length=255), nullable=False),
        sa.Column("args", sa.LargeBinary(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("override_args", sa.LargeBinary(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("decided_by", sa.String(length=255), nullable=True),
        sa.Column("decided_at", UtcDateTime(), nullable=True),
        sa.Column("resume_run_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["thread_id"],
            ["threads.thread_id"],
            name=op.f("fk_approvals_thread_id_threads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("thread_id", "tool_call_id", name=op.f("pk_approvals")),
    )
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.create_index("ix_approvals_status_thread", ["status", "thread_id"], unique=False)

    op.create_table(
        "events",
        sa.Column("thread_id", sa.String(length=64), nullable=False),
        sa.Column("event_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["thread_id"], ["threads.thread_id"], name=op.f("fk_events_thread_id_threads"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("thread_id", "event_id", name=op.f("pk_events")),
    )
    op.create_table(
        "records",
        sa.Column("thread_id", sa.String(length=64), nullable=False),
        sa.Column("tool_call_id", sa.String(length=255), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["thread_id"],
            ["threads.thread_id"],
            name=op.f("fk_records_thread_id_threads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("thread_id", "tool_call_id", name=op.f("pk_records")),
    )
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("thread_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("checkpoints", sa.Integer(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("started_at", UtcDateTime(), nullable=True),
        sa.Column("finished_at", UtcDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["thread_id"], ["threads.thread_id"], name=op.f("fk_runs_thread_id_threads"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_runs")),
        sa.UniqueConstraint("thread_id", "idempotency_key", name="uq_runs_thread_id_idempotency_key"),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index("ix_runs_status", ["status"], unique=False)
        batch_op.create_index("ix_runs_thread_created", ["thread_id", "created_at"], unique=False)
        batch_op.create_index(
            "uq_runs_one_active_per_thread",
            ["thread_id"],
            unique=True,
            sqlite_where=sa.text("status IN ('queued', 'running')"),
            postgresql_where=sa.text("status IN ('queued', 'running')"),
        )

    op.create_table(
        "tool_executions",
        sa.Column("thread_id", sa.String(length=64), nullable=False),
        sa.Column("tool_call_id", sa.String(length=255), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("tool_name", sa.String(length=255), nullable=False),
        sa.Column("result", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["thread_id"],
            ["threads.thread_id"],
            name=op.f("fk_tool_executions_thread_id_threads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("thread_id", "tool_call_id", name=op.f("pk_tool_executions")),
    )


def downgrade() -> None:
    op.drop_table("tool_executions")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_runs_one_active_per_thread",
            sqlite_where=sa.text("status IN ('queued', 'running')"),
            postgresql_where=sa.text("status IN ('queued', 'running')"),
        )
        batch_op.drop_index("ix_runs_thread_created")
        batch_op.drop_index("ix_runs_status")

    op.drop_table("runs")
    op.drop_table("records")
    op.drop_table("events")
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.drop_index("ix_approvals_status_thread")

    op.drop_table("approvals")
    with op.batch_alter_table("threads", schema=None) as batch_op:
        batch_op.drop_index("ix_threads_user_updated")

    op.drop_table("threads")
    op.drop_table("orders")
    op.drop_table("faqs")
    op.drop_table("accounts")
