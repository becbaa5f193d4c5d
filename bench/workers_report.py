"""The workers benchmark's results: what one worker count at one level measured, and the docs section."""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field

from bench.web_load import LoadResult
from bench.web_report import BASELINE, ms, p50

__all__ = ("BASELINE", "Measured", "Report", "p95", "render")


def p95(values: list[float]) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=20, method="inclusive")[18]


@dataclass
class Measured:
    """One system (the baseline, or ours on PostgreSQL) with some workers, at one level of users."""

    system: str
    workers: int
    load: LoadResult
    server_cpu: float
    """CPU seconds all its server processes used while the turns ran."""
    client_cpu: float
    """CPU seconds the load generator (this process) used meanwhile."""
    machine_busy: float
    """The share of all the machine's cores busy meanwhile, whoever used them (PostgreSQL, other jobs)."""
    peak_connections: int
    """The most connections the database had at once (0 for the baseline, which has none)."""
    trouble: list[str] = field(default_factory=list[str])
    statuses: dict[str, int] = field(default_factory=dict[str, int])
    exit_codes: list[int | None] = field(default_factory=list[int | None])

    @property
    def users(self) -> int:
        return self.load.users

    @property
    def cpu_ms_per_turn(self) -> float:
        turns = self.load.completed_turns
        return self.server_cpu / turns * 1000 if turns else float("nan")

    @property
    def server_cores(self) -> float:
        return self.server_cpu / self.load.elapsed if self.load.elapsed else 0.0

    def line(self) -> str:
        load = self.load
        return (
            f"{self.system} x{self.workers}, {self.users} users: {load.completed_turns}/"
            f"{self.users * load.turns_per_user} turns in {load.elapsed:.1f}s = {load.turns_per_second:.1f}/s, "
            f"first delta p50 {ms(p50(load.first_delta))} p95 {ms(p95(load.first_delta))} ms, "
            f"{load.error_count} errors, server CPU {self.server_cores:.2f} cores, machine {self.machine_busy:.0%}"
        )


@dataclass
class Report:
    command: str
    date: str
    machine: str
    versions: list[str]
    settings: str
    measured: list[Measured] = field(default_factory=list[Measured])
    failures: list[str] = field(default_factory=list[str])
    run_seconds: float = 0.0
    load_start: float = 0.0
    load_end: float = 0.0
    budget_end: float = float("inf")

    def find(self, system: str, workers: int, users: int) -> Measured | None:
        return next(
            (m for m in self.measured if (m.system, m.workers, m.users) == (system, workers, users)), None
        )

    def levels(self) -> list[int]:
        return sorted({m.users for m in self.measured})

    def ours(self, users: int) -> list[Measured]:
        return sorted(
            (m for m in self.measured if m.system != BASELINE and m.users == users), key=lambda m: m.workers
        )


def _ratio(mine: float, theirs: float) -> str:
    return f"{mine / theirs:.2f}x" if theirs and mine == mine and theirs == theirs else "n/a"


def render(report: Report) -> str:
    cpus = os.cpu_count() or 0
    lines = [
        "## Workers (PostgreSQL): 1, 2 and 4 server processes on one database",
        "",
        "Real server processes (`python -m cli serve --model demo`) on one fresh PostgreSQL database per "
        "measurement (created and dropped by the benchmark), and the simulated users of the web benchmark "
        "(`bench/web_load.py`) spread over them round robin: each user creates its thread, opens its event stream "
        'and posts its turns ("Where is ORD-5678?", the demo\'s 3-node turn) on one worker, so each worker drives '
        "the runs posted to it. Every turn's events are checked as in the web benchmark. The baseline is the bare "
        "Starlette SSE app (`bench/web_baseline.py`, one process, no database) under the same load. The workers' "
        "connection pools are capped so that together they stay within a share of the server's connections (see "
        "Settings): uncapped, a worker opens up to 60, and two workers under 200 users exhausted a default "
        "PostgreSQL's 100 (`too many clients already`).",
        "",
        "### Environment",
        "",
        f"- Date: {report.date}; command: `{report.command}`",
        f"- Machine: {report.machine}: **{cpus} CPUs, shared** with other jobs while this ran (other test runs, "
        "and the PostgreSQL server itself, on the same cores); load average (1 min) "
        f"{report.load_start:.1f} at the start, {report.load_end:.1f} at the end",
        *(f"- {line}" for line in report.versions),
        f"- Settings: {report.settings}",
        f"- Run time: {report.run_seconds:.0f}s",
        "",
        "### Results",
        "",
        "Turns/s: completed turns over the time from the start signal to the last user's end. First delta: from "
        "sending the POST to the turn's first `text_delta`. Server CPU: all the workers' processes together, per "
        "turn and in cores while the turns ran; machine: the share of all cores busy meanwhile, whoever used them "
        "(PostgreSQL, the load generator, other jobs). Connections: the most the database had at once.",
        "",
        "| server | workers | users | streams open | turns ok | errors | turns/s | first delta p50 ms | p95 ms "
        "| turn p50 ms | server CPU ms/turn | server CPU cores | client CPU cores | machine busy | connections |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in sorted(report.measured, key=lambda m: (m.users, m.system != BASELINE, m.workers)):
        load = m.load
        lines.append(
            f"| {m.system} | {m.workers} | {m.users} | {load.streams_open}/{m.users} "
            f"| {load.completed_turns}/{m.users * load.turns_per_user} | {load.error_count} "
            f"| {load.turns_per_second:.1f} | {ms(p50(load.first_delta))} | {ms(p95(load.first_delta))} "
            f"| {ms(p50(load.turn_latency))} | {m.cpu_ms_per_turn:.1f} | {m.server_cores:.2f} "
            f"| {m.client_cpu / load.elapsed if load.elapsed else 0.0:.2f} | {m.machine_busy:.0%} "
            f"| {m.peak_connections or '-'} |"
        )
    lines += [
        "",
        "Against 1 worker at the same level (turns/s: higher is better; latency: lower is better), and turns/s "
        "against the baseline:",
        "",
        "| users | workers | turns/s | first delta p50 | first delta p95 | turns/s / baseline |",
        "|---|---|---|---|---|---|",
    ]
    for users in report.levels():
        base = report.find(BASELINE, 1, users)
        one = report.find("PostgreSQL", 1, users)
        for m in report.ours(users):
            o = one.load if one is not None else None
            lines.append(
                f"| {users} | {m.workers} "
                f"| {_ratio(m.load.turns_per_second, o.turns_per_second) if o else 'n/a'} "
                f"| {_ratio(p50(m.load.first_delta), p50(o.first_delta)) if o else 'n/a'} "
                f"| {_ratio(p95(m.load.first_delta), p95(o.first_delta)) if o else 'n/a'} "
                f"| {_ratio(m.load.turns_per_second, base.load.turns_per_second) if base else 'n/a'} |"
            )
    lines += _reading(report, cpus)
    lines += _errors(report)
    if report.failures:
        lines += [
            "",
            "Measurements that could not run:",
            "",
            *(f"- `{failure}`" for failure in report.failures),
        ]
    return "\n".join(lines).rstrip() + "\n"


def _reading(report: Report, cpus: int) -> list[str]:
    """What the numbers say, computed from them: how far more workers went, and what held them back."""
    out: list[str] = []
    for users in report.levels():
        ours = report.ours(users)
        one = report.find("PostgreSQL", 1, users)
        if one is None or len(ours) < 2 or not one.load.turns_per_second:
            continue
        best = max(ours, key=lambda m: m.load.turns_per_second)
        gain = best.load.turns_per_second / one.load.turns_per_second
        alone = (
            f"One worker kept {one.server_cores:.2f} cores busy ({one.cpu_ms_per_turn:.0f} ms of server CPU per "
            f"turn) with the machine {one.machine_busy:.0%} busy"
        )
        if best is one:
            out.append(
                f"- {users} users: no more workers gave more turns/s than one ({one.load.turns_per_second:.1f}/s). {alone}."
            )
            continue
        out.append(
            f"- {users} users: the most turns/s came with {best.workers} workers, {gain:.2f}x the single "
            f"worker's {one.load.turns_per_second:.1f}/s. {alone}; the {best.workers} workers used "
            f"{best.server_cores:.2f} cores ({best.cpu_ms_per_turn:.0f} ms per turn) and the machine was "
            f"{best.machine_busy:.0%} busy."
        )
    ours = [m for m in report.measured if m.system != BASELINE]
    crowded = [m for m in ours if m.workers == 1 and m.machine_busy >= 0.85 and m.server_cores < 0.8]
    if crowded:
        out.append(
            f"- The machine was saturated before a second worker started: with one worker its {cpus} cores were "
            f"{_span(m.machine_busy for m in crowded)} busy while that worker got "
            f"{_span((m.server_cores for m in crowded), '.2f')} of a core (a worker is one event loop: alone on a "
            "quiet machine it takes close to one). Other jobs held the rest, so more workers could only win a larger "
            "share of a full machine: these ratios measure that contention more than the design."
        )
    elif any(m.workers > 1 and m.machine_busy >= 0.85 for m in ours):
        out.append(
            f"- With more than one worker the machine's {cpus} cores were saturated: the workers, PostgreSQL and the "
            "load generator share them, so workers beyond the free cores add processes to schedule, not capacity."
        )
    more = [m for m in ours if m.workers > 1]
    one = [m for m in ours if m.workers == 1]
    if more and one:
        out.append(
            f"- Server CPU per turn: {_span((m.cpu_ms_per_turn for m in one), '.0f')} ms with one worker, "
            f"{_span((m.cpu_ms_per_turn for m in more), '.0f')} ms with more: each worker has its own pools, "
            "caches and event loop, and more processes on the same cores mean more switching between them."
        )
    return ["", "### Reading", "", *out] if out else []


def _span(values: Iterable[float], spec: str = ".0%") -> str:
    found = sorted(values)
    low, high = format(found[0], spec), format(found[-1], spec)
    return low if low == high else f"{low}-{high}"


def _errors(report: Report) -> list[str]:
    out: list[str] = []
    for m in report.measured:
        kinds = ", ".join(
            f"{kind} x{count} (e.g. {m.load.error_samples[kind][:200]!r})"
            for kind, count in m.load.errors.items()
        )
        statuses = ", ".join(f"{status} x{count}" for status, count in sorted(m.statuses.items()))
        if not (kinds or statuses or m.trouble):
            continue
        out.append(
            f"- {m.system} x{m.workers}, {m.users} users: " + "; ".join(filter(None, [kinds, statuses]))
        )
        distinct = list(dict.fromkeys(m.trouble))
        out += [f"  - server log: `{line[:300]}`" for line in distinct[:6]]
    return ["", "Errors seen (client side, the access logs, the servers' logs):", "", *out] if out else []
