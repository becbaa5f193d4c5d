"""files: a thread's uploaded files, their bytes stored once per user and content

`files` names a thread's files; `file_blobs` holds one row per user and sha256 with where the
bytes are; `file_chunks` keeps the bytes when the database is the backend; `file_garbage` lists
bytes still to delete from the backend (see docs/files.md).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.schema import UtcDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "file_blobs",
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("blob_key", sa.String(length=200), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("ready", sa.Boolean(), nullable=False),
        sa.Column("claimed_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "sha256", name=op.f("pk_file_blobs")),
        sa.UniqueConstraint("blob_key", name=op.f("uq_file_blobs_blob_key")),
    )
    op.create_table(
        "files",
        sa.Column("file_id", sa.String(length=64), nullable=False),
        sa.Column("thread_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("media_type", sa.String(length=100), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["thread_id"],
            ["threads.thread_id"],
            name=op.f("fk_files_thread_id_threads"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id", "sha256"],
            ["file_blobs.user_id", "file_blobs.sha256"],
            name="fk_files_user_id_sha256_file_blobs",
        ),
        sa.PrimaryKeyConstraint("file_id", name=op.f("pk_files")),
    )
    op.create_index("ix_files_thread_created", "files", ["thread_id", "created_at"])
    op.create_index("ix_files_user_sha256", "files", ["user_id", "sha256"])
    op.create_table(
        "file_chunks",
        sa.Column("blob_key", sa.String(length=200), nullable=False),
        sa.Column("offset", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("blob_key", "offset", name=op.f("pk_file_chunks")),
    )
    op.create_table(
        "file_garbage",
        sa.Column("blob_key", sa.String(length=200), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("blob_key", name=op.f("pk_file_garbage")),
    )


def downgrade() -> None:
    op.drop_table("file_garbage")
    op.drop_table("file_chunks")
    op.drop_index("ix_files_user_sha256", table_name="files")
    op.drop_index("ix_files_thread_created", table_name="files")
    op.drop_table("files")
    op.drop_table("file_blobs")
