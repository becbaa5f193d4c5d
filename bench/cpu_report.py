"""`bench.cpu`'s results: rounds, the ratios and verdicts they give, and the two sections of the docs."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

__all__ = (
    "AI_SDK",
    "BASELINE",
    "FIRST_DELTA_LIMIT_MS",
    "LIMITS",
    "NATIVE",
    "Report",
    "Round",
    "paired_ratio",
    "quantile",
    "render_cpu",
    "render_first_delta",
)

BASELINE, NATIVE, AI_SDK = "baseline", "ours, native API", "ours, AI SDK endpoint"
SIDES = (BASELINE, NATIVE, AI_SDK)
LIMITS = {NATIVE: 1.5, AI_SDK: 1.3}
"""Ours' server CPU per turn may be at most this many times the baseline's."""
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
    def cpu_per_turn(self) -> float | None:
        return self.server_cpu / self.turns if self.turns else None


@dataclass
class Report:
    command: str
    rounds: list[Round] = field(default_factory=list[Round])
    alone: dict[tuple[str, str], list[float]] = field(default_factory=dict[tuple[str, str], list[float]])
    """(database, side): first-delta seconds of one user alone."""
    errors: Counter[str] = field(default_factory=Counter[str])
    notes: list[str] = field(default_factory=list[str])
    environment: list[str] = field(default_factory=list[str])
    seconds: float = 0.0

    def cells(self) -> list[tuple[str, int]]:
        return list(dict.fromkeys((r.database, r.users) for r in self.rounds))

    def of(self, database: str, users: int, side: str) -> list[Round]:
        return [r for r in self.rounds if (r.database, r.users, r.side) == (database, users, side)]


def paired_ratio(ours: list[Round], baseline: list[Round]) -> float | None:
    """The median, over round numbers both sides completed turns in, of ours' CPU per turn / the baseline's.

    Rounds of the same number ran back to back on the same core: pairing them cancels the core's
    changes of speed between rounds, which a ratio of totals would not.
    """
    theirs = {r.number: r.cpu_per_turn for r in baseline}
    ratios = [
        mine / other
        for r in ours
        if (mine := r.cpu_per_turn) is not None and (other := theirs.get(r.number)) is not None and other > 0
    ]
    return statistics.median(ratios) if ratios else None


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def verdict(ratio: float | None, limit: float) -> str:
    return "n/a" if ratio is None else ("**PASS**" if ratio <= limit else "**FAIL**")


def _ms(seconds: float | None, digits: int = 1) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.{digits}f}"


def render_cpu(report: Report) -> list[str]:
    lines = [
        "## Server CPU per turn: ours against pydantic-ai's own adapter",
        "",
        "Both servers serve the demo shop's agent on its demo model with the same deps, each in its own "
        'process pinned to one core (core 1; the clients on core 0): the 3-node turn "Where is ORD-5678?" '
        "(model, `lookup_order`, model). **Baseline**: pydantic-ai's `VercelAIAdapter.dispatch_request` on "
        "uvicorn and Starlette, nothing stored, the client sending the whole conversation each turn "
        "(`bench/cpu_baseline.py`). **Ours**: a real `durable-chat serve`, tracing at its default, over the "
        "native API (`POST …/messages`, the thread's SSE stream to `run_finished`) and the AI SDK endpoint "
        "(one `POST /api/ai-sdk/chat` per turn). The sides take rounds in turn, the order rotating; a "
        "round's CPU is the server's utime+stime (`/proc/PID/stat`, every thread) over the round, divided "
        "by the turns completed in it. Ratios are medians of per-round ratios (a round of ours against "
        "the baseline's round of the same number). *Busy* is CPU over the round's wall time; *kept off its "
        "core* the time the server's main thread was runnable but waiting for its core (`/proc/PID/schedstat`): "
        "other work on that core (another process pinned there, or the server's own threads). A server kept "
        "off its core, or neither busy nor kept off it (waiting on its clients or its database), still has "
        "its own CPU per turn, measured at a lighter load; a client near 100% busy or often kept off its core "
        "would be the bottleneck.",
        "",
        "### Environment",
        "",
        *report.environment,
        *(f"- {note}" for note in report.notes),
        f"- Run time: {report.seconds:.0f} s",
        "",
        "### Results",
        "",
        "| database | users | server | rounds | turns | CPU ms/turn | turns/s per core | turns/s achieved "
        "| server busy | client busy | server / client kept off its core | first delta p50 / p99 (ms) | errors |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for database, users in report.cells():
        for side in SIDES:
            rounds = report.of(database, users, side)
            if not rounds:
                continue
            turns = sum(r.turns for r in rounds)
            cpu = sum(r.server_cpu for r in rounds)
            elapsed = sum(r.elapsed for r in rounds) or 1e-9
            per_turn = cpu / turns if turns else None
            deltas = [d for r in rounds for d in r.first_delta]
            lines.append(
                f"| {database} | {users} | {side} | {len(rounds)} | {turns} | {_ms(per_turn)} | "
                f"{(1 / per_turn if per_turn else 0):.0f} | {turns / elapsed:.0f} | {cpu / elapsed:.0%} | "
                f"{sum(r.client_cpu for r in rounds) / elapsed:.0%} | "
                f"{sum(r.server_wait for r in rounds) / elapsed:.0%} / {sum(r.client_wait for r in rounds) / elapsed:.0%} | "
                f"{_ms(quantile(deltas, 0.5))} / {_ms(quantile(deltas, 0.99))} | {sum(r.errors for r in rounds)} |"
            )
    lines += [
        "",
        "### Targets",
        "",
        "| database | users | measure | ratio | target | verdict |",
        "|---|---:|---|---:|---|---|",
    ]
    for database, users in report.cells():
        baseline = report.of(database, users, BASELINE)
        for side, limit in LIMITS.items():
            ratio = paired_ratio(report.of(database, users, side), baseline)
            lines.append(
                f"| {database} | {users} | CPU per turn, {side} / baseline | "
                f"{'—' if ratio is None else f'{ratio:.2f}x'} | at most {limit:g}x | {verdict(ratio, limit)} |"
            )
    if report.errors:
        lines += ["", "Errors:", "", *(f"- {kind}: {count}" for kind, count in report.errors.items())]
    return lines


def render_first_delta(report: Report) -> list[str]:
    lines = [
        "## First delta: ours against pydantic-ai's own adapter",
        "",
        "One user alone, on the servers of the CPU benchmark above (same pinning, same agent): from sending "
        "the POST to receiving the turn's first text delta (ours: `text_delta` on the thread's stream, or "
        "the AI SDK stream's first `text-delta`; the baseline: its AI SDK stream's first `text-delta`). The "
        "sides alternate turn by turn. Under 200 users, the p99 of the same measure comes from the CPU "
        "benchmark's rounds.",
        "",
        "| database | server | turns | p50 (ms) | p90 | ours p50 - baseline p50 (ms) | target | verdict |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    databases = list(dict.fromkeys(database for database, _ in report.alone))
    for database in databases:
        base = quantile(report.alone.get((database, BASELINE), []), 0.5)
        for side in SIDES:
            values = report.alone.get((database, side))
            if values is None:
                continue
            p50 = quantile(values, 0.5)
            if side == BASELINE or p50 is None or base is None:
                diff, target, judged = "", "", ""
            else:
                gap = (p50 - base) * 1000
                diff = f"{gap:+.1f}"
                target = f"at most +{FIRST_DELTA_LIMIT_MS:g} ms"
                judged = "**PASS**" if gap <= FIRST_DELTA_LIMIT_MS else "**FAIL**"
            lines.append(
                f"| {database} | {side} | {len(values)} | {_ms(p50)} | {_ms(quantile(values, 0.9))} | "
                f"{diff} | {target} | {judged} |"
            )
    lines += ["", "Under load (all users' turns in the CPU rounds):", ""]
    lines += ["| database | users | server | first delta p50 (ms) | p99 (ms) |", "|---|---:|---|---:|---:|"]
    for database, users in report.cells():
        for side in SIDES:
            deltas = [d for r in report.of(database, users, side) for d in r.first_delta]
            if deltas:
                lines.append(
                    f"| {database} | {users} | {side} | {_ms(quantile(deltas, 0.5))} | "
                    f"{_ms(quantile(deltas, 0.99))} |"
                )
    return lines
