"""index plans and compaction: indexes the sweeps' and listings' generic plans can match, and the purge's

`ix_approvals_decided`: a reviewer's decided calls, newest decided first (a partial index on the
calls no longer pending). `ix_webhook_deliveries_undelivered`: the outbox's pending or given-up
deliveries (a partial index on those not delivered). `ix_threads_updated`: the purge's threads
idle since a cutoff, a range of an index instead of a walk of every thread.
`runs.events_compacted_at` and `ix_runs_compactable`: a finished run's text deltas are dropped from
the event log past the replay window (`store.compaction`); the index finds the runs still to do.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.schema import UtcDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_NOT_PENDING = sa.text("status <> 'pending'")
_UNDELIVERED = sa.text("delivered_at IS NULL")
_COMPACTABLE = sa.text("finished_at IS NOT NULL AND events_compacted_at IS NULL")


def upgrade() -> None:
    op.create_index(
        "ix_approvals_decided",
        "approvals",
        ["reviewers", "decided_at", "thread_id", "tool_call_id"],
        sqlite_where=_NOT_PENDING,
        postgresql_where=_NOT_PENDING,
    )
    op.create_index(
        "ix_webhook_deliveries_undelivered",
        "webhook_deliveries",
        ["event_id", "url"],
        sqlite_where=_UNDELIVERED,
        postgresql_where=_UNDELIVERED,
    )
    op.create_index("ix_threads_updated", "threads", ["updated_at", "thread_id"])
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("events_compacted_at", UtcDateTime(), nullable=True))
    op.create_index(
        "ix_runs_compactable",
        "runs",
        ["finished_at"],
        sqlite_where=_COMPACTABLE,
        postgresql_where=_COMPACTABLE,
    )


def downgrade() -> None:
    op.drop_index("ix_runs_compactable", table_name="runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("events_compacted_at")
    op.drop_index("ix_threads_updated", table_name="threads")
    op.drop_index("ix_webhook_deliveries_undelivered", table_name="webhook_deliveries")
    op.drop_index("ix_approvals_decided", table_name="approvals")
