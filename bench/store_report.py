"""The store benchmark's results as markdown tables with verdicts, for the terminal and the store section."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from bench.harness.reports import table
from bench.harness.stats import times
from bench.store_workloads import Part, Results, Settings

__all__ = ("Check", "Section", "async_floor_checks", "checks", "render")

FAIR_FLOOR_LIMIT = 1.5
FLAT_SAVE_LIMIT = 1.3
OPENAI_LIMIT = 5.0
ASYNC_FLOOR_LIMIT = 1.5
GROWTH_SIZES = (10, 1_000)
GROWTH_LIMIT = 1.2
Rule = Literal["at most", "at least", "above"]


@dataclass(frozen=True)
class Section:
    """One dialect's results."""

    title: str
    results: Results
    pragmas: dict[str, str] | None = None
    growth: dict[str, dict[int, float]] = field(default_factory=dict[str, dict[int, float]])
    """Median ms of one turn at each of `GROWTH_SIZES` messages, by side (`bench.store.history_growth`)."""


@dataclass(frozen=True)
class Check:
    """A target, as the ratio it is judged by; with no `limit`, a ratio shown beside one, not judged."""

    label: str
    ratio: float
    limit: float | None = None
    rule: Rule = "at most"

    @property
    def verdict(self) -> str:
        if math.isnan(self.ratio) or self.limit is None:
            return "n/a"
        passed = {
            "at most": self.ratio <= self.limit,
            "at least": self.ratio >= self.limit,
            "above": self.ratio > self.limit,
        }
        return "PASS" if passed[self.rule] else "FAIL"

    def row(self) -> list[str]:
        if self.limit is None:
            return [self.label, times(self.ratio), "", ""]
        return [self.label, times(self.ratio), f"{self.rule} {self.limit:g}x", f"**{self.verdict}**"]


def checks(section: Section) -> list[Check]:
    """The targets, each as the ratio it is judged by."""
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
        found.append(
            Check(
                f"{title}: save at {sizes[-1]:,} / save at {sizes[0]:,} messages (flat)",
                flat,
                FLAT_SAVE_LIMIT,
            )
        )
    rivals: tuple[tuple[str, float, Rule], ...] = (
        ("openai", OPENAI_LIMIT, "at least"),
        ("langgraph", 1.0, "above"),
    )
    found += [
        Check(
            f"{title}: turns/s at concurrency 50, ours / {results.names[key]}",
            results.throughput_ratio("ours", key),
            limit,
            rule,
        )
        for key, limit, rule in rivals
        if key in results.names
    ]
    return found


def async_floor_checks(section: Section) -> list[Check]:
    """Target 5: load+save within 1.5x of the async floor (aiosqlite on SQLite, asyncpg on PostgreSQL),
    judged on `ours` (no history cache: the floor's work); `warm` (history cached) shown beside it."""
    results, title = section.results, section.title
    floor = "async" if title == "SQLite" else "fair"
    found: list[Check] = []
    for size in (10, 100):
        if math.isnan(ratio := results.ratio("ours", floor, size, "total")):
            continue
        label = f"{title}: load+save at {size:,} messages, ours (no history cache) / async floor"
        found.append(Check(label, ratio, ASYNC_FLOOR_LIMIT))
        if not math.isnan(warm := results.ratio("warm", floor, size, "total")):
            label = f"{title}: the same, history cached (not judged: the floor caches nothing)"
            found.append(Check(label, warm))
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
        ratios = [
            (f"ours / ours at {sizes[0] if sizes else 0:,}", "ours", "ours", sizes[0] if sizes else None)
        ]
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


def _growth(section: Section) -> tuple[list[str], Check]:
    """The growth table of one database, and its flatness (paired differences: see the store's method)."""
    medians, (small, large) = section.growth, GROWTH_SIZES
    base, added = medians["baseline"], medians["added"]
    rows = [
        [f"{size:,}", *(f"{medians[key][size]:.2f}" for key in ("baseline", "ours", "added", "store"))]
        for size in GROWTH_SIZES
    ]
    header = "messages | no persistence (baseline) | ours: load + run + save | ours - baseline (paired) | of which our load + save"
    lines = [
        f"{section.title}: one in-process turn (pydantic-ai `Agent` on a `FunctionModel`), median ms:",
        "",
        *table(header, rows),
        "",
    ]
    label = f"{section.title}: (ours at 1,000 - baseline growth 10 to 1,000) / ours at 10"
    flatness = (base[small] + added[large]) / (base[small] + added[small])
    return lines, Check(label, flatness, GROWTH_LIMIT)


def render(sections: Sequence[Section], settings: Settings, environment_lines: Sequence[str]) -> list[str]:
    lines = ["### Environment", "", *environment_lines, ""]
    for section in sections:
        lines += _section(section, settings)
    growth = [_growth(section) for section in sections if section.growth]
    verdicts = [check for _, check in growth] + [c for s in sections for c in async_floor_checks(s)]
    return [
        *lines,
        "### Targets",
        "",
        "Ratios are medians of paired ratios: turns of the same round, runs of the same repetition.",
        "",
        *table("measure | ratio | target | verdict", [check.row() for s in sections for check in checks(s)]),
        "",
        "### History growth and the async floor",
        "",
        *(line for table_lines, _ in growth for line in table_lines),
        *table("target | ratio | limit | verdict", [check.row() for check in verdicts]),
    ]
