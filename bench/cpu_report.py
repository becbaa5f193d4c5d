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
    """One side's round: its server's CPU and the turns completed in it."""

    database: str
    users: int
    side: str
    number: int
    server_cpu: float
    client_cpu: float
    elapsed: float
    turns: int
    first_delta: tuple[float, ...] = ()
    errors: int = 0
    server_wait: float = 0.0
    """Seconds the server's loop thread was runnable but off its core (other work on the machine)."""
    client_wait: float = 0.0

    @property
    def cpu_per_turn(self) -> float:
        return ratio(self.server_cpu, self.turns)

    @classmethod
    def of(cls, database: str, users: int, side: str, number: int, m: Measured) -> Round:
        load = m.result
        return cls(
            *(database, users, side, number, m.server_cpu, m.client_cpu, load.elapsed, load.completed_turns),
            tuple(load.first_delta),
            load.error_count,
            m.server_wait,
            m.client_wait,
        )


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
            turns, cpu = sum(r.turns for r in rounds), sum(r.server_cpu for r in rounds)
            elapsed = sum(r.elapsed for r in rounds) or 1e-9
            per_turn = ratio(cpu, turns)
            deltas = [d for r in rounds for d in r.first_delta]
            rows.append(
                [
                    database,
                    users,
                    side,
                    len(rounds),
                    turns,
                    ms(per_turn),
                    f"{ratio(1, per_turn):.0f}",
                    f"{turns / elapsed:.0f}",
                    f"{cpu / elapsed:.0%}",
                    f"{sum(r.client_cpu for r in rounds) / elapsed:.0%}",
                    f"{sum(r.server_wait for r in rounds) / elapsed:.0%} / {sum(r.client_wait for r in rounds) / elapsed:.0%}",
                    f"{ms(median(deltas))} / {ms(percentile(deltas, 0.99))}",
                    sum(r.errors for r in rounds),
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
        if (deltas := [d for r in report.of(database, users, side) for d in r.first_delta])
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
