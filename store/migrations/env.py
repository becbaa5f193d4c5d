"""Alembic environment of durable-chat's own migrations (see `store.migrate.run_environment`)."""

from __future__ import annotations

from store.migrate import run_environment
from store.schema import metadata

run_environment(metadata)
