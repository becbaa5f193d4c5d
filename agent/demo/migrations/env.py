"""Alembic environment of the demo shop's own tables (see `store.migrate.run_environment`)."""

from __future__ import annotations

from agent.demo.tables import metadata
from store import run_environment

run_environment(metadata)
