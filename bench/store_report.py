"""The store benchmark's results, and their markdown tables with verdicts for the store section."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from bench.harness.reports import table
from bench.harness.stats import median, paired_ratio, times
from bench.store_systems import Timing

Part = Literal["load", "save", "total"]
FAIR_FLOOR_LIMIT = 1.5
FLAT_SAVE_LIMIT = 1.3
ASYNC_FLOOR_LIMIT = 1.5


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

    def skip(self, key: str, reason: str) -> None:
        self.unavailable[key] = reason
        print(f"  {self.names.get(key, key)}: {reason}", flush=True)

    def sizes(self) -> list[int]:
        return sorted({size for by_size in self.timings.values() for size in by_size})

    def _parts(self, key: str, size: int, part: Part) -> dict[int, float]:
        return {round_: getattr(t, part) for round_, t in self.timings.get(key, {}).get(size, {}).items()}

    def median(self, key: str, size: int, part: Part) -> float:
        return median(self._parts(key, size, part).values())

    def ratio(self, key: str, other: str, size: int, part: Part, *, other_size: int | None = None) -> float:
        """`key`'s time over `other`'s, paired by round: at `size`, or against `other_size` for `other`."""
        return paired_ratio(self._parts(key, size, part), self._parts(other, other_size or size, part))


@dataclass(frozen=True)
class Section:
    """One dialect's results."""

    title: str
    results: Results
    pragmas: dict[str, str] | None = None


@dataclass(frozen=True)
class Check:
    """A target, as the ratio it is judged by: at most `limit`."""

    label: str
    ratio: float
    limit: float

    @property
    def verdict(self) -> str:
        return "n/a" if math.isnan(self.ratio) else "PASS" if self.ratio <= self.limit else "FAIL"

    def row(self) -> list[str]:
        return [self.label, times(self.ratio), f"at most {self.limit:g}x", f"**{self.verdict}**"]


def checks(section: Section) -> list[Check]:
    """The targets, each as the ratio it is judged by (on ours with no history cache: the floors' work)."""
    results, title = section.results, section.title
    sizes = results.sizes()
    found = [
        Check(
            f"{title}: load+save at {size:,} messages, ours / fair floor",
            results.ratio("ours", "fair", size, "total"),
            FAIR_FLOOR_LIMIT,
        )
        for size in sizes
    ]
    if len(sizes) > 1:
        flat = results.ratio("ours", "ours", sizes[-1], "save", other_size=sizes[0])
        label = f"{title}: save at {sizes[-1]:,} / save at {sizes[0]:,} messages (flat)"
        found.append(Check(label, flat, FLAT_SAVE_LIMIT))
    # Issue 14's target 5: within 1.5x of the async floor (aiosqlite; on PostgreSQL the fair floor is asyncpg).
    found += [
        Check(f"{title}: load+save at {size:,} messages, ours / async floor", ratio, ASYNC_FLOOR_LIMIT)
        for size in (10, 100)
        if not math.isnan(ratio := results.ratio("ours", "async", size, "total"))
    ]
    return found


def _ms(seconds: float) -> str:
    return "—" if math.isnan(seconds) else f"{seconds * 1000:.3g}"


def _timing_table(results: Results, part: Part) -> list[str]:
    keys = [key for key in results.names if key in results.timings]
    sizes = results.sizes()
    ratios: list[tuple[str, str, str, int | None]]
    if part == "total":
        # Ours against each floor that pays for decoding: the target's, and the async one when measured;
        # then ours with the history cached against the last of them, for reference.
        floors = [key for key in ("fair", "async") if key in keys]
        ratios = [(f"ours / {results.names[key]}", "ours", key, None) for key in floors]
        if "warm" in keys and floors:
            ratios.append((f"history cached / {results.names[floors[-1]]}", "warm", floors[-1], None))
    else:
        ratios = [(f"ours / ours at {sizes[0]:,}", "ours", "ours", sizes[0])] if sizes else []
    rows = [
        [
            f"{size:,}",
            *(_ms(results.median(key, size, part)) for key in keys),
            *(times(results.ratio(mine, other, size, part, other_size=at)) for _, mine, other, at in ratios),
        ]
        for size in sizes
    ]
    return table(["messages", *(results.names[key] for key in keys), *(title for title, *_ in ratios)], rows)


def _section(section: Section, repeats: int) -> list[str]:
    results = section.results
    lines = [f"### {section.title}", ""]
    if section.pragmas:
        pragmas = ", ".join(f"{name}={value}" for name, value in section.pragmas.items())
        lines += [f"Journal settings (ours, and the sqlite3 floors likewise): {pragmas}.", ""]
    return [
        *lines,
        f"One turn (load the whole history, append, save), median ms of {repeats} rounds:",
        "",
        *_timing_table(results, "total"),
        "",
        "Save only, from the same turns:",
        "",
        *_timing_table(results, "save"),
        "",
        *(f"- {results.names.get(key, key)}: {reason}" for key, reason in results.unavailable.items()),
        *([""] if results.unavailable else []),
    ]


def render(sections: Sequence[Section], repeats: int, environment_lines: Sequence[str]) -> list[str]:
    return [
        "### Environment",
        "",
        *environment_lines,
        "",
        *(line for section in sections for line in _section(section, repeats)),
        "### Targets",
        "",
        "Ratios are medians of paired ratios: turns of the same round.",
        "",
        *table("measure | ratio | target | verdict", [check.row() for s in sections for check in checks(s)]),
    ]
