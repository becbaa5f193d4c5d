"""The store benchmark's results as markdown tables with verdicts, for the terminal and the store section."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bench.harness.reports import table
from bench.harness.stats import times
from bench.store_workloads import Part, Results, Settings

FAIR_FLOOR_LIMIT = 1.5
FLAT_SAVE_LIMIT = 1.3
ASYNC_FLOOR_LIMIT = 1.5


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


def _section(section: Section, settings: Settings) -> list[str]:
    results = section.results
    lines = [f"### {section.title}", ""]
    if section.pragmas:
        pragmas = ", ".join(f"{name}={value}" for name, value in section.pragmas.items())
        lines += [f"Journal settings (ours, and the sqlite3 floors likewise): {pragmas}.", ""]
    rates = [
        [name, f"{rate:,.0f}", times(results.throughput_ratio("ours", key))]
        for key, name in results.names.items()
        if not math.isnan(rate := results.turns_per_second(key))
    ]
    return [
        *lines,
        f"One turn (load the whole history, append, save), median ms of {settings.repeats} rounds:",
        "",
        *_timing_table(results, "total"),
        "",
        "Save only, from the same turns:",
        "",
        *_timing_table(results, "save"),
        "",
        f"{settings.conversations} conversations x {settings.turns} turns, all at once; median of "
        f"{settings.concurrent_runs} run(s):",
        "",
        *table("system | turns/s | ours / system", rates),
        "",
        *(f"- {results.names.get(key, key)}: {reason}" for key, reason in results.unavailable.items()),
        *([""] if results.unavailable else []),
    ]


def render(sections: Sequence[Section], settings: Settings, environment_lines: Sequence[str]) -> list[str]:
    return [
        "### Environment",
        "",
        *environment_lines,
        "",
        *(line for section in sections for line in _section(section, settings)),
        "### Targets",
        "",
        "Ratios are medians of paired ratios: turns of the same round.",
        "",
        *table("measure | ratio | target | verdict", [check.row() for s in sections for check in checks(s)]),
    ]
