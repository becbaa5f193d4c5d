"""`bench.cpu`'s rounds, the ratios and verdicts they give, and its two sections of the docs."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.harness.clients import Measured
from bench.harness.reports import section, table
from bench.harness.stats import median, ms, percentile, ratio, times
from bench.harness.stats import paired_ratio as paired

BASELINE, NATIVE, AI_SDK = "baseline", "ours, native API", "ours, AI SDK endpoint"
SIDES = (BASELINE, NATIVE, AI_SDK)
LIMITS = {NATIVE: 1.5, AI_SDK: 1.3}
"""Ours' server CPU per turn may be at most this many times the baseline's."""
PLAIN_LIMITS = {NATIVE: 1.3, AI_SDK: 1.3}
"""The same for the plain app (issue 29, target 1)."""
FIRST_DELTA_LIMIT_MS = 5.0
"""One user alone: ours' first text delta p50 may come at most this much later than the baseline's."""


@dataclass(frozen=True)
class Round:
    """One side's round: the load it ran and its server's CPU."""

    database: str
    users: int
    side: str
    number: int
    measured: Measured

    @property
    def cpu_per_turn(self) -> float:
        return self.measured.cpu_per_turn


@dataclass
class Report:
    rounds: list[Round] = field(default_factory=list[Round])
    alone: dict[tuple[str, str], list[float]] = field(default_factory=dict[tuple[str, str], list[float]])
    """(database, side): first-delta seconds of one user alone."""
    errors: Counter[str] = field(default_factory=Counter[str])
    notes: list[str] = field(default_factory=list[str])

    def cells(self) -> list[tuple[str, int]]:
        return list(dict.fromkeys((r.database, r.users) for r in self.rounds))

    def of(self, database: str, users: int, side: str) -> list[Round]:
        return [r for r in self.rounds if (r.database, r.users, r.side) == (database, users, side)]


def paired_ratio(ours: Sequence[Round], baseline: Sequence[Round]) -> float:
    """The median over round numbers of ours' CPU per turn / the baseline's (rounds run back to back)."""
    return paired({r.number: r.cpu_per_turn for r in ours}, {r.number: r.cpu_per_turn for r in baseline})


def _verdict(value: float, limit: float) -> str:
    return "n/a" if math.isnan(value) else ("**PASS**" if value <= limit else "**FAIL**")


def render_cpu(report: Report, environment_lines: Sequence[str], *, plain: bool = False) -> list[str]:
    rows: list[Sequence[object]] = []
    for database, users in report.cells():
        for side in SIDES:
            if not (rounds := report.of(database, users, side)):
                continue
            m = [r.measured for r in rounds]
            turns, cpu = sum(x.result.completed_turns for x in m), sum(x.server_cpu for x in m)
            elapsed = sum(x.result.elapsed for x in m) or 1e-9
            per_turn = ratio(cpu, turns)
            deltas = [d for x in m for d in x.result.first_delta]
            waits = [sum(x.server_wait for x in m) / elapsed, sum(x.client_wait for x in m) / elapsed]
            rows.append(
                [
                    *(database, users, side, len(rounds), turns, ms(per_turn), f"{ratio(1, per_turn):.0f}"),
                    *(f"{turns / elapsed:.0f}", f"{cpu / elapsed:.0%}"),
                    f"{sum(x.client_cpu for x in m) / elapsed:.0%}",
                    f"{waits[0]:.0%} / {waits[1]:.0%}",
                    f"{ms(median(deltas))} / {ms(percentile(deltas, 0.99))}",
                    sum(x.result.error_count for x in m),
                ]
            )
    targets: list[Sequence[object]] = []
    for database, users in report.cells():
        baseline = report.of(database, users, BASELINE)
        for side, limit in (PLAIN_LIMITS if plain else LIMITS).items():
            found = paired_ratio(report.of(database, users, side), baseline)
            measure = f"CPU per turn, {side} / baseline"
            targets.append(
                [database, users, measure, times(found), f"at most {limit:g}x", _verdict(found, limit)]
            )
    errors = [f"- {kind}: {count}" for kind, count in report.errors.items()]
    return [
        *section(environment_lines),
        *table(
            "database | users | server | rounds | turns | CPU ms/turn | turns/s per core | turns/s achieved | server busy "
            "| client busy | server / client kept off its core | first delta p50 / p99 (ms) | errors",
            rows,
            align="lrlrrrrrrrrrr",
        ),
        "",
        "### Targets",
        "",
        *table("database | users | measure | ratio | target | verdict", targets, align="lrlrll"),
        *(["", "Errors:", "", *errors] if errors else []),
    ]


def render_first_delta(report: Report) -> list[str]:
    rows: list[Sequence[object]] = []
    for database in dict.fromkeys(database for database, _ in report.alone):
        base = median(report.alone.get((database, BASELINE), []))
        for side in SIDES:
            if (values := report.alone.get((database, side))) is None:
                continue
            gap = (median(values) - base) * 1000
            judged = side != BASELINE and not math.isnan(gap)
            verdict = "**PASS**" if gap <= FIRST_DELTA_LIMIT_MS else "**FAIL**"
            rows.append(
                [database, side, len(values), ms(median(values)), ms(percentile(values, 0.9))]
                + (
                    [f"{gap:+.1f}", f"at most +{FIRST_DELTA_LIMIT_MS:g} ms", verdict]
                    if judged
                    else ["", "", ""]
                )
            )
    loaded: list[Sequence[object]] = [
        [database, users, side, ms(median(deltas)), ms(percentile(deltas, 0.99))]
        for database, users in report.cells()
        for side in SIDES
        if (deltas := [d for r in report.of(database, users, side) for d in r.measured.result.first_delta])
    ]
    return [
        *table(
            "database | server | turns | p50 (ms) | p90 | ours p50 - baseline p50 (ms) | target | verdict",
            rows,
            align="llrrrr",
        ),
        "",
        "Under load (all users' turns in the CPU rounds):",
        "",
        *table("database | users | server | first delta p50 (ms) | p99 (ms)", loaded, align="lrlrr"),
    ]
