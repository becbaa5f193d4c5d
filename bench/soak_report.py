"""`bench.soak`'s section: the samples a minute apart, the verdict (flat after the warm-up, or not),
and the server's censuses (`bench.soak_serve`) as a table with the types that grew most."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness.reports import table
from bench.soak_users import Tally

__all__ = ("WARM_UP_FRACTION", "Sample", "census_lines", "judge", "render", "type_growth")

WARM_UP_FRACTION = 0.2
RSS_GROWTH_LIMIT = 0.05
"""Flat means resident memory grows by at most this fraction from the end of the warm-up to the end."""
_ARENA = 1 << 20
"""Bytes in one of pymalloc's arenas (CPython 3.10 and later on 64-bit Linux)."""


@dataclass(frozen=True)
class Sample:
    seconds: float
    turns: int
    rss_kb: int
    fds: int
    connections: int
    threads: int


def judge(samples: Sequence[Sample], warm_up_seconds: float | None = None) -> tuple[bool, str]:
    """Whether memory, files and connections stay flat after the warm-up (the first fifth unless given), and why."""
    end = samples[-1].seconds
    warm_up = end * WARM_UP_FRACTION if warm_up_seconds is None else warm_up_seconds
    warm = [s for s in samples if s.seconds <= warm_up]
    after = [s for s in samples if s.seconds > warm_up]
    if len(warm) < 2 or len(after) < 3:
        return False, "too few samples to judge"
    start_mb = statistics.median(s.rss_kb for s in after[:3]) / 1024
    end_mb = statistics.median(s.rss_kb for s in after[-3:]) / 1024
    growth = (end_mb - start_mb) / start_mb
    slope = statistics.linear_regression(
        [s.seconds / 60 for s in after], [s.rss_kb / 1024 for s in after]
    ).slope
    fds_ok = max(s.fds for s in after) <= max(s.fds for s in warm) * 1.1 + 2
    connections_ok = max(s.connections for s in after) <= max(s.connections for s in warm) + 2
    text = (
        f"after the warm-up (the first {warm_up / 60:.0f} min), resident memory went from {start_mb:.1f} to "
        f"{end_mb:.1f} MB ({growth:+.1%}; least-squares slope {slope:+.2f} MB/min); open file descriptors stayed "
        f"within {min(s.fds for s in after)} to {max(s.fds for s in after)} (warm-up: {min(s.fds for s in warm)} to "
        f"{max(s.fds for s in warm)}); database connections within {min(s.connections for s in after)} to "
        f"{max(s.connections for s in after)} (warm-up: {min(s.connections for s in warm)} to "
        f"{max(s.connections for s in warm)})"
    )
    return growth <= RSS_GROWTH_LIMIT and fds_ok and connections_ok, text


def _each_minute(samples: Sequence[Sample]) -> list[Sample]:
    """The first sample, the one nearest each whole minute, and the last (after the users stopped)."""
    chosen, minute = [samples[0]], 1
    for sample in samples[1:-1]:
        if sample.seconds >= minute * 60:
            chosen.append(sample)
            minute = int(sample.seconds // 60) + 1
    return [*chosen, samples[-1]]


def render(
    *,
    database: str,
    minutes: float,
    command: str,
    when: str,
    users: int,
    think_seconds: float,
    samples: Sequence[Sample],
    tally: Tally,
    trouble: Sequence[str],
    statuses: dict[str, int],
    load: tuple[str, str],
    history_cache_mb: int | None = None,
    warm_up_minutes: float | None = None,
    census: Sequence[str] = (),
) -> str:
    flat, verdict = judge(samples, None if warm_up_minutes is None else warm_up_minutes * 60)
    runs = ", ".join(f"{status} {count}" for status, count in tally.runs.most_common())
    errors = "; ".join(f"{kind} x{count} ({tally.samples[kind]})" for kind, count in tally.errors.items())
    logged = "; ".join(list(dict.fromkeys(trouble))[:5]) or "nothing at WARNING or above"
    answers = ", ".join(f"{status} x{count}" for status, count in sorted(statuses.items())) or "none"
    rows: list[Sequence[object]] = []
    previous: Sample | None = None
    for row in _each_minute(samples):
        rate = (
            ""
            if previous is None
            else f"{(row.turns - previous.turns) / max(row.seconds - previous.seconds, 1e-9):.1f}"
        )
        rows.append(
            [
                f"{row.seconds / 60:.1f}",
                row.turns,
                rate,
                f"{row.rss_kb / 1024:.1f}",
                row.fds,
                row.connections,
                row.threads,
            ]
        )
        previous = row
    connections = "sessions (pg_stat_activity)" if database == "PostgreSQL" else "fds on the database files"
    lines = [
        f"- `{command}`, {when}; {minutes:g} minutes, one server"
        + ("" if history_cache_mb is None else f" with a {history_cache_mb} MB history cache")
        + f"; {users} users, about {think_seconds:g} s of thinking each time; load average "
        f"(1, 5, 15 min) {load[0]} before, {load[1]} after.",
        f"- {tally.turns} runs finished ({runs}); {tally.approved} calls approved, {tally.rejected} rejected; "
        f"{tally.threads} threads; {tally.streams} event streams opened, {tally.reconnects} of them reconnections "
        "after a drop mid-run.",
        f"- Client errors: {errors or 'none'} (ids repeated or going backwards on a stream would count here).",
        f"- Server log: {logged}; non-2xx answers in its access log: {answers}.",
        "",
        *table(
            f"minute | runs so far | runs/s (last minute) | RSS (MB) | open fds | {connections} | OS threads",
            rows,
            "rrrrrrr",
        ),
        "",
        f"**Verdict: {'flat' if flat else 'not flat'}** — {verdict}.",
    ]
    return "\n".join([*lines, *(["", *census] if census else [])]) + "\n"


def type_growth(
    before: Mapping[str, Sequence[int]], after: Mapping[str, Sequence[int]]
) -> list[tuple[str, int, int]]:
    """(type, count growth, size growth) for every type whose count or size changed, largest size growth first."""
    rows = [
        (
            name,
            after.get(name, (0, 0))[0] - before.get(name, (0, 0))[0],
            after.get(name, (0, 0))[1] - before.get(name, (0, 0))[1],
        )
        for name in before.keys() | after.keys()
    ]
    return sorted((row for row in rows if row[1] or row[2]), key=lambda row: (-row[2], -row[1], row[0]))


def census_lines(directory: Path, labels: Sequence[str], *, top: int = 8) -> list[str]:
    """The censuses `bench.soak_serve` wrote to `directory`: a row each (`labels`: the minute each was asked
    for), and the types that grew most from the end of the warm-up (the second) to the last."""
    numbers = sorted(int(path.name.removeprefix("done-")) for path in directory.glob("done-*"))
    rows: list[Sequence[object]] = []
    for label, number in zip(labels, numbers, strict=True):
        taken: dict[str, Any] = json.loads((directory / f"taken-{number}.json").read_text())
        pymalloc, malloc, cached = taken["pymalloc"], taken["malloc"], taken["caches"]
        megabytes = [
            taken["rss_kb"] / 1024,
            pymalloc.get("arenas", 0) * _ARENA / 2**20,
            pymalloc.get("in_use", 0) / 2**20,
            *(malloc.get(key, 0) / 2**20 for key in ("heap", "in_use", "free", "mmapped")),
        ]
        cells = [f"{value:.1f}" for value in megabytes]
        rows.append(
            [
                label,
                cells[0],
                taken["gc_objects"],
                *cells[1:],
                f"{cached['history_charge'] / 2**20:.1f}",
                cached["histories"],
                cached["records"],
            ]
        )
    first, last = numbers[min(1, len(numbers) - 1)], numbers[-1]
    types = [json.loads((directory / f"types-{n}.json").read_text()) for n in (first, last)]
    grown = [row for row in type_growth(types[0], types[1]) if row[1] > 0][:top]
    return [
        *table(
            "minute | RSS | gc objects | pymalloc arenas | pymalloc in use | malloc heap | malloc in use | malloc free "
            "| malloc mmapped | history cache charge | histories | records",
            rows,
            "r" * 12,
        ),
        "",
        f"Tracked objects that grew most from minute {labels[min(1, len(labels) - 1)]} to the end: "
        + (", ".join(f"{name} {count:+d} ({size / 1024:+.0f} kB)" for name, count, size in grown) or "none")
        + ".",
    ]
