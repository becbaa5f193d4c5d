"""The soak's samples as a table a minute apart, and the verdict: flat after the warm-up, or not."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from bench.soak_load import Tally

__all__ = ("RSS_GROWTH_LIMIT", "WARM_UP_FRACTION", "Sample", "Verdict", "judge", "render")

WARM_UP_FRACTION = 0.2
RSS_GROWTH_LIMIT = 0.05
"""Flat means resident memory grows by at most this fraction from the end of the warm-up to the end."""


@dataclass(frozen=True)
class Sample:
    seconds: float
    turns: int
    rss_kb: int
    fds: int
    connections: int
    threads: int


@dataclass(frozen=True)
class Verdict:
    flat: bool
    text: str


def judge(samples: Sequence[Sample], warm_up_seconds: float | None = None) -> Verdict:
    """Compare the run after its warm-up with the warm-up: memory's growth and slope, fds and connections.

    The warm-up is the first fifth of the run unless `warm_up_seconds` says how long it is.
    """
    end = samples[-1].seconds
    warm_up = end * WARM_UP_FRACTION if warm_up_seconds is None else warm_up_seconds
    warm = [s for s in samples if s.seconds <= warm_up]
    after = [s for s in samples if s.seconds > warm_up]
    if len(warm) < 2 or len(after) < 3:
        return Verdict(False, "too few samples to judge")
    start_mb = statistics.median(s.rss_kb for s in after[:3]) / 1024
    end_mb = statistics.median(s.rss_kb for s in after[-3:]) / 1024
    growth = (end_mb - start_mb) / start_mb
    slope = statistics.linear_regression(
        [s.seconds / 60 for s in after], [s.rss_kb / 1024 for s in after]
    ).slope
    fds_ok = max(s.fds for s in after) <= max(s.fds for s in warm) * 1.1 + 2
    connections_ok = max(s.connections for s in after) <= max(s.connections for s in warm) + 2
    flat = growth <= RSS_GROWTH_LIMIT and fds_ok and connections_ok
    text = (
        f"after the warm-up (the first {warm_up / 60:.0f} min), resident memory went from "
        f"{start_mb:.1f} to {end_mb:.1f} MB ({growth:+.1%}; least-squares slope {slope:+.2f} MB/min); open file "
        f"descriptors stayed within {min(s.fds for s in after)} to {max(s.fds for s in after)} (warm-up: "
        f"{min(s.fds for s in warm)} to {max(s.fds for s in warm)}); database connections within "
        f"{min(s.connections for s in after)} to {max(s.connections for s in after)} (warm-up: "
        f"{min(s.connections for s in warm)} to {max(s.connections for s in warm)})"
    )
    return Verdict(flat, text)


def render(
    *,
    backend: str,
    minutes: float,
    users: int,
    think_seconds: float,
    samples: Sequence[Sample],
    tally: Tally,
    trouble: Sequence[str],
    statuses: dict[str, int],
    load: tuple[str, str],
    when: datetime,
    history_cache_mb: int | None = None,
    census: Sequence[str] = (),
    warm_up_minutes: float | None = None,
) -> str:
    name = "PostgreSQL" if backend == "postgresql" else "SQLite"
    connections = "sessions (pg_stat_activity)" if backend == "postgresql" else "fds on the database files"
    flag = " --postgres URL" if backend == "postgresql" else ""
    if history_cache_mb is not None:
        flag += f" --history-cache-mb {history_cache_mb}"
    if warm_up_minutes is not None:
        flag += f" --warm-up {warm_up_minutes:g}"
    verdict = judge(samples, None if warm_up_minutes is None else warm_up_minutes * 60)
    runs = ", ".join(f"{status} {count}" for status, count in tally.runs.most_common())
    errors = "; ".join(f"{kind} x{count} ({tally.samples[kind]})" for kind, count in tally.errors.items())
    lines = [
        f"## Soak on {name}: {minutes:g} minutes, one server"
        + ("" if history_cache_mb is None else f", a {history_cache_mb} MB history cache"),
        "",
        f"`python -m bench.soak --minutes {minutes:g}{flag}`, {when:%Y-%m-%d %H:%M} UTC. One `durable-chat serve` "
        f"(demo model) and {users} users in the benchmark's process, each looping: a message (a refund, a double "
        f"cancellation, an order or FAQ question, a greeting), the thread's event stream followed to the run's end "
        f"with `Last-Event-ID` (about one stream in three dropped mid-run and reopened), each pending call approved "
        f"or rejected at random and the resumed run followed, then about {think_seconds:g} s of thinking; a new "
        f"thread every 10 messages. The machine has 2 cores, shared with other work: load average (1, 5, 15 min) "
        f"{load[0]} before, {load[1]} after.",
        "",
        f"- {tally.turns} runs finished ({runs}); {tally.approved} calls approved, {tally.rejected} rejected; "
        f"{tally.threads} threads; {tally.streams} event streams opened, {tally.reconnects} of them reconnections "
        f"after a drop mid-run.",
        f"- Client errors: {errors or 'none'} (ids repeated or going backwards on a stream would count here).",
        f"- Server log: {'nothing at WARNING or above' if not trouble else '; '.join(list(dict.fromkeys(trouble))[:5])}; "
        f"non-2xx answers in its access log: "
        f"{', '.join(f'{status} x{count}' for status, count in sorted(statuses.items())) or 'none'}.",
        "",
        f"| minute | runs so far | runs/s (last minute) | RSS (MB) | open fds | {connections} | OS threads |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    previous: Sample | None = None
    for row in _each_minute(samples):
        rate = (
            ""
            if previous is None
            else f"{(row.turns - previous.turns) / max(row.seconds - previous.seconds, 1e-9):.1f}"
        )
        lines.append(
            f"| {row.seconds / 60:.1f} | {row.turns} | {rate} | {row.rss_kb / 1024:.1f} | {row.fds} | "
            f"{row.connections} | {row.threads} |"
        )
        previous = row
    lines += ["", f"**Verdict: {'flat' if verdict.flat else 'not flat'}** — {verdict.text}."]
    if census:
        lines += ["", *census]
    return "\n".join(lines) + "\n"


def _each_minute(samples: Sequence[Sample]) -> list[Sample]:
    """The first sample, the one nearest each whole minute, and the last (after the users stopped)."""
    chosen = [samples[0]]
    minute = 1
    for sample in samples[1:-1]:
        if sample.seconds >= minute * 60:
            chosen.append(sample)
            minute = int(sample.seconds // 60) + 1
    chosen.append(samples[-1])
    return chosen
