"""Where a step's time goes: wall time of each store call, CPU per turn, and CPU by package.

cProfile's cumulative times are unreliable across SQLAlchemy's greenlet switches, so its profile is
summed by own time per package.
"""

from __future__ import annotations

import cProfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import CodeType
from typing import Any, Literal

from bench.harness.reports import ROOT
from store import Database

__all__ = ("CATEGORIES", "Sample", "Timers", "Variant", "cpu_by_group")

Variant = Literal["ours", "unlogged", "bare"]
"""Ours; ours with the event log's background appends skipped; the same turn with no persistence."""

CATEGORIES: tuple[tuple[str, str], ...] = (
    ("checkpoint", "conversations.save_with"),
    ("load", "conversations.load"),
    ("append", "events.insert"),
    ("start", "runs.start_reserving"),
)
"""A short label and the attribute path on a `Database` of each store call a step makes."""
APPEND = "events.insert"
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # label, markers found in a function's file (or a built-in's name); the first group to match wins
    ("our store", (f"{ROOT / 'store'}/",)),
    ("our agent and stream", (f"{ROOT / 'agent'}/", f"{ROOT / 'stream'}/")),
    ("SQLAlchemy", ("/sqlalchemy/", "greenlet")),
    ("database drivers", ("/aiosqlite/", "/asyncpg/", "sqlite3", "_queue.SimpleQueue")),
    (
        "pydantic-ai, pydantic, anyio",
        ("/pydantic_ai/", "/pydantic_graph/", "/pydantic/", "pydantic_core", "/anyio/", "/sniffio/"),
    ),
    ("asyncio", ("/asyncio/", "select.epoll", "_asyncio", "_contextvars")),
)
OTHER = "the standard library and built-ins, for any of them"


@dataclass(frozen=True)
class Sample:
    wall: float
    loop_cpu: float
    process_cpu: float


@dataclass
class Timers:
    """Wall time per store call over timed turns, and samples of whole turns per variant."""

    spent: dict[str, list[float]] = field(default_factory=dict[str, list[float]])
    """Per label: the wall seconds of each call during timed turns."""
    missing: list[str] = field(default_factory=list[str])
    """Store calls of `CATEGORIES` the store does not have (renamed since)."""
    samples: dict[Variant, list[Sample]] = field(default_factory=dict[Variant, list[Sample]])
    profiles: dict[Variant, cProfile.Profile] = field(default_factory=dict[Variant, cProfile.Profile])
    profiled_turns: int = 0
    variant: Variant | None = None

    @classmethod
    def around(cls, db: Database) -> Timers:
        """Timers wrapped around `db`'s store calls (its objects are changed for good)."""
        timers = cls()
        for label, path in CATEGORIES:
            owner_name, name = path.split(".")
            owner = getattr(db, owner_name, None)
            if (method := getattr(owner, name, None)) is None:
                timers.missing.append(path)
            else:
                setattr(owner, name, timers._timed(label, path, method))
        return timers

    def _timed(
        self, label: str, path: str, method: Callable[..., Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        spent = self.spent.setdefault(label, [])

        async def timed(*args: Any, **kwargs: Any) -> Any:
            if path == APPEND and self.variant == "unlogged":
                return (
                    None  # only the background stores: a checkpoint stores its events in its own transaction
                )
            if self.variant != "ours":
                return await method(*args, **kwargs)
            started = time.perf_counter()
            try:
                return await method(*args, **kwargs)
            finally:
                spent.append(time.perf_counter() - started)

        return timed

    async def sample(self, variant: Variant, turn: Callable[[], Awaitable[object]]) -> None:
        """Run `turn` as `variant`, keeping its wall and CPU times (and its store calls' times, for ours)."""
        self.variant = variant
        wall, loop, process = time.perf_counter(), time.thread_time(), time.process_time()
        try:
            await turn()
        finally:
            sample = Sample(
                time.perf_counter() - wall, time.thread_time() - loop, time.process_time() - process
            )
            self.samples.setdefault(variant, []).append(sample)
            self.variant = None

    def per_turn(self, label: str) -> tuple[float, float]:
        """Calls and wall seconds of one store call, per timed turn of ours."""
        spent, turns = self.spent.get(label, []), max(len(self.samples.get("ours", [])), 1)
        return len(spent) / turns, sum(spent) / turns

    def profiler(self, variant: Variant) -> cProfile.Profile:
        # Per-thread CPU, not wall time: waiting in epoll or on the driver's thread is no work here.
        return self.profiles.setdefault(variant, cProfile.Profile(time.thread_time))


def cpu_by_group(profile: cProfile.Profile) -> dict[str, float]:
    """The loop thread's CPU seconds in a profile, summed by own time per package group."""
    found: dict[str, float] = {}
    for entry in profile.getstats():
        where = entry.code.co_filename if isinstance(entry.code, CodeType) else entry.code
        group = next((label for label, markers in GROUPS if any(m in where for m in markers)), OTHER)
        found[group] = found.get(group, 0.0) + entry.inlinetime
    return found
