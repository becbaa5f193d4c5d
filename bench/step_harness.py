"""pydantic-ai-harness's `StepPersistence` on SQLite: the step benchmark's third side, when installed.

pydantic-ai-harness pins an older pydantic-ai than ours, so it is installed for the benchmark
only and without its dependencies (`pip install --no-deps pydantic-ai-harness`, or `make
bench-step`); its `StepPersistence` capability then runs on the pydantic-ai we use. Without it,
the step benchmark says so and leaves the column out.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic_ai.capabilities import AbstractCapability

__all__ = ("INSTALL", "Harness")

INSTALL = "pip install --no-deps pydantic-ai-harness"


class Harness:
    """One `SqliteStepStore` file, and a new `StepPersistence` on it for every turn."""

    def __init__(self, folder: Path) -> None:
        from pydantic_ai_harness.step_persistence import SqliteStepStore

        self.store = SqliteStepStore(database=folder / "harness.db")
        self.version = metadata.version("pydantic-ai-harness")

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
