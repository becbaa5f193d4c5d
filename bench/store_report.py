"""The store benchmark's results as markdown tables with verdicts, for the terminal and the store section."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from bench.harness.reports import table
from bench.harness.stats import times
from bench.store_workloads import Part, Results, Settings

__all__ = ("Check", "Section", "checks", "render")

FAIR_FLOOR_LIMIT = 1.5
FLAT_SAVE_LIMIT = 1.3
OPENAI_LIMIT = 5.0
Rule = Literal["at most", "at least", "above"]


@dataclass(frozen=True)
class Section:
    """One dialect's results."""

    title: str
    results: Results
    pragmas: dict[str, str] | None = None


@dataclass(frozen=True)
class Check:
    label: str
    ratio: float
    limit: float
    rule: Rule

    @property
    def verdict(self) -> str:
        if math.isnan(self.ratio):
            return "n/a"
        passed = {
            "at most": self.ratio <= self.limit,
            "at least": self.ratio >= self.limit,
            "above": self.ratio > self.limit,
        }
        return "PASS" if passed[self.rule] else "FAIL"


def checks(section: Section) -> list[Check]:
    """The targets, each as the ratio it is judged by."""
    results, title = section.results, section.title
    sizes = results.sizes()
    found = [
        Check(
            f"{title}: load+save at {size:,} messages, ours / fair floor",
            results.ratio("ours", "fair", size, "total"),
            FAIR_FLOOR_LIMIT,
            "at most",
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
                "at most",
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


def render(sections: Sequence[Section], settings: Settings, environment_lines: Sequence[str]) -> list[str]:
    lines = ["### Environment", "", *environment_lines, ""]
    for section in sections:
        lines += _section(section, settings)
    rows = [
        [c.label, times(c.ratio), f"{c.rule} {c.limit:g}x", f"**{c.verdict}**"]
        for s in sections
        for c in checks(s)
    ]
    return [
        *lines,
        "### Targets",
        "",
        "Ratios are medians of paired ratios: turns of the same round, runs of the same repetition.",
        "",
        *table("measure | ratio | target | verdict", rows),
    ]
