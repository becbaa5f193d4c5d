"""pydantic-ai-harness's `StepPersistence` on SQLite: the step benchmark's third side, when installed.

pydantic-ai-harness pins an older pydantic-ai than ours, so it is installed for the benchmark
only and without its dependencies (`pip install --no-deps pydantic-ai-harness`, or `make
bench-step`); its `StepPersistence` capability then runs on the pydantic-ai we use. Without it,
the step benchmark says so and leaves the column out.
"""

from __future__ import annotations

import sqlite3
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic_ai.capabilities import AbstractCapability

__all__ = ("INSTALL", "Harness")

INSTALL = "pip install --no-deps pydantic-ai-harness"


class Harness:
    """One `SqliteStepStore` on a long-lived connection, and a new `StepPersistence` on it for every turn.

    The connection has ours' journal settings (WAL, `synchronous=NORMAL`), as a server would keep
    one open: given a path instead, the store opens a connection per call, in WAL with SQLite's
    default `synchronous=FULL` (an fsync per commit), which made it 3-5 times slower here.
    """

    def __init__(self, folder: Path) -> None:
        from pydantic_ai_harness.step_persistence import SqliteStepStore

        # Its calls run on worker threads (anyio.to_thread): the connection must allow that.
        self.connection = sqlite3.connect(folder / "harness.db", check_same_thread=False)
        for pragma in ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA busy_timeout=30000"):
            self.connection.execute(pragma)
        self.store = SqliteStepStore(connection=self.connection)
        self.version = metadata.version("pydantic-ai-harness")

    def close(self) -> None:
        self.connection.close()

    @classmethod
    def open(cls, folder: Path) -> tuple[Harness | None, str | None]:
        """The harness, or `None` and why not."""
        try:
            return cls(folder), None
        except ImportError as error:
            return None, f"pydantic-ai-harness is not installed ({error.name}): `{INSTALL}` adds its column"

    def capability(self) -> AbstractCapability[Any]:
        from pydantic_ai_harness.step_persistence import StepPersistence

        # Defaults, as its README's quick start: a run id per `Agent.run`, events, snapshots, tool effects.
        return StepPersistence(store=self.store)
