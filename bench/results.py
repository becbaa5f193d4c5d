"""What the workloads measured, and the medians and ratios the report is made of.

Ratios are medians of paired ratios: two systems' turns from the same round (or their runs of the
same repetition) ran back to back, so a burst of load from another process on this shared
machine weighs on both sides of each ratio alike.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Literal

from bench.systems import Timing

__all__ = ["Part", "Results", "Settings"]

Part = Literal["load", "save", "total"]


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...] = (10, 100, 1_000)
    warmup: int = 2
    repeats: int = 20
    conversations: int = 50
    turns: int = 20
    concurrent_runs: int = 3


def _part(timing: Timing, part: Part) -> float:
    match part:
        case "load":
            return timing.load
        case "save":
            return timing.save
        case "total":
            return timing.total


@dataclass
class Results:
    names: dict[str, str] = field(default_factory=dict[str, str])
    """Each measured system's display name by its key."""
    unavailable: dict[str, str] = field(default_factory=dict[str, str])
    """Why a system wasn't measured, or stopped being measured, by its key."""
    timings: dict[str, dict[int, dict[int, Timing]]] = field(
        default_factory=dict[str, dict[int, dict[int, Timing]]]
    )
    """Per system, per history size, per round: one turn's timing."""
    throughput: dict[str, dict[int, float]] = field(default_factory=dict[str, dict[int, float]])
    """Per system, per repetition: turns per second of the concurrent workload."""
    storage: dict[str, int] = field(default_factory=dict[str, int])
    """Per system: bytes its data took after the concurrent workload."""
    raw_json_bytes: int = 0
    """The compact JSON of every message that workload stored, added up."""

    def sizes(self) -> list[int]:
        return sorted({size for by_size in self.timings.values() for size in by_size})

    def median(self, key: str, size: int, part: Part) -> float | None:
        rounds = self.timings.get(key, {}).get(size)
        return statistics.median(_part(t, part) for t in rounds.values()) if rounds else None

    def ratio(
        self, key: str, other: str, size: int, part: Part, *, other_size: int | None = None
    ) -> float | None:
        """`key`'s time over `other`'s, paired by round: at `size`, or against `other_size` for `other`."""
        mine = self.timings.get(key, {}).get(size, {})
        theirs = self.timings.get(other, {}).get(size if other_size is None else other_size, {})
        pairs = [
            _part(mine[r], part) / _part(theirs[r], part)
            for r in mine.keys() & theirs.keys()
            if _part(theirs[r], part) > 0
        ]
        return statistics.median(pairs) if pairs else None

    def turns_per_second(self, key: str) -> float | None:
        runs = self.throughput.get(key)
        return statistics.median(runs.values()) if runs else None

    def throughput_ratio(self, key: str, other: str) -> float | None:
        """`key`'s turns per second over `other`'s, paired by repetition."""
        mine, theirs = self.throughput.get(key, {}), self.throughput.get(other, {})
        pairs = [mine[run] / theirs[run] for run in mine.keys() & theirs.keys() if theirs[run] > 0]
        return statistics.median(pairs) if pairs else None
