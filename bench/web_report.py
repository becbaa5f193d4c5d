"""The web benchmark's results: the phases measured, their rendering, the docs section."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from bench.web_load import LoadResult

__all__ = ("BASELINE", "LATENCY_MARGIN", "STREAMS_TARGET", "Phase", "Report", "ms", "render")

BASELINE = "baseline"
STREAMS_TARGET = 500
LATENCY_MARGIN = 0.010
"""Ours' first-delta p50 may exceed the baseline's by this many seconds."""


@dataclass
class Phase:
    """One server, one level of concurrent users."""

    system: str
    """`baseline`, `SQLite` or `PostgreSQL`."""
    load: LoadResult
    idle_rss_kb: int
    peak_rss_kb: int
    server_cpu: float
    """CPU seconds the server used while the turns ran."""
    client_cpu: float
    """CPU seconds this (load-generating) process used meanwhile."""
    trouble: list[str] = field(default_factory=list[str])
    """Server log lines that look like errors or warnings."""
    statuses: dict[str, int] = field(default_factory=dict[str, int])
    """Non-2xx answers in the server's access log, by status."""
    exit_code: int | None = None
    alone_first_delta: list[float] = field(default_factory=list[float])
    """First-delta latencies of one user alone on the server, before the load."""

    @property
    def users(self) -> int:
        return self.load.users

    @property
    def cpu_ms_per_turn(self) -> float:
        turns = self.load.completed_turns
        return self.server_cpu / turns * 1000 if turns else float("nan")

    @property
    def server_busy(self) -> float:
        """The server's CPU time over the wall time of the turns: 1.0 is one core, all the time."""
        return self.server_cpu / self.load.elapsed if self.load.elapsed else 0.0

    @property
    def client_busy(self) -> float:
        return self.client_cpu / self.load.elapsed if self.load.elapsed else 0.0

    @property
    def ok(self) -> bool:
        return (
            self.load.error_count == 0
            and self.load.completed_turns == self.load.users * self.load.turns_per_user
            and self.load.streams_open == self.load.users
        )


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def p99(values: list[float]) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[98]


@dataclass
class Report:
    command: str
    date: str
    machine: str
    versions: list[str]
    settings: str
    phases: list[Phase] = field(default_factory=list[Phase])
    notes: list[str] = field(default_factory=list[str])
    failures: list[str] = field(default_factory=list[str])
    """Phases that could not run (a server that did not start), as text."""
    run_seconds: float = 0.0
    load_start: float = 0.0
    load_end: float = 0.0
    budget_end: float = float("inf")
    """`time.monotonic()` by which the turns of every phase must be done."""

    def phase(self, system: str, users: int) -> Phase | None:
        return next((p for p in self.phases if p.system == system and p.users == users), None)

    def systems(self) -> list[str]:
        return list(dict.fromkeys(p.system for p in self.phases if p.system != BASELINE))

    def levels(self) -> list[int]:
        return sorted({p.users for p in self.phases})

    def verdicts(self) -> list[tuple[str, str, bool]]:
        """(target, measured, met) for every target that was measured."""
        rows: list[tuple[str, str, bool]] = []
        for system in self.systems():
            held = self.phase(system, STREAMS_TARGET)
            if held is not None:
                rows.append(
                    (
                        f"{system}: {STREAMS_TARGET} concurrent streams held, no error",
                        f"{held.load.streams_open}/{held.users} streams open, "
                        f"{held.load.completed_turns}/{held.users * held.load.turns_per_user} turns, "
                        f"{held.load.error_count} errors",
                        held.ok,
                    )
                )
            for users in self.levels():
                ours, base = self.phase(system, users), self.phase(BASELINE, users)
                if ours is None or base is None or not ours.load.first_delta or not base.load.first_delta:
                    continue
                gap = p50(ours.load.first_delta) - p50(base.load.first_delta)
                rows.append(
                    (
                        f"{system}, {users} users: first-delta p50 within {LATENCY_MARGIN * 1000:.0f} ms of the baseline",
                        f"{ms(p50(ours.load.first_delta))} vs {ms(p50(base.load.first_delta))} ms (+{ms(gap)} ms)",
                        gap <= LATENCY_MARGIN,
                    )
                )
        return rows

    @property
    def passed(self) -> bool:
        verdicts = self.verdicts()
        return bool(verdicts) and all(met for _, _, met in verdicts) and not self.failures


def ms(seconds: float) -> str:
    """Milliseconds for a table: whole ones from 100 up, one decimal below."""
    milliseconds = seconds * 1000
    return f"{milliseconds:,.0f}" if abs(milliseconds) >= 100 else f"{milliseconds:.1f}"


def _ratio(value: float) -> str:
    return f"{value:.2f}x" if value == value else "n/a"


def render(report: Report) -> str:
    lines = [
        "## Web: concurrent users over HTTP and SSE against a bare Starlette SSE app",
        "",
        "A real server process (`python -m cli serve --model demo`) and simulated users in the benchmark "
        "process (asyncio, an `httpx.AsyncClient` per user, loopback). Each user creates a thread, opens its event "
        "stream (`GET /api/threads/{id}/events`) and keeps it open; when every stream is open, all users "
        '"Where is ORD-5678?" (the demo\'s 3-node turn: model, `lookup_order`, model) turn after turn: '
        "`POST …/messages`, then the stream up to `run_finished`. Every turn's events are checked (increasing "
        "ids, the demo turn's shape, its `run_id`, `text_done` equal to its deltas). The baseline "
        "(`bench/web_baseline.py`) is a Starlette app on the same uvicorn and sse-starlette with the same routes, "
        "tokens and events, published from memory with no database, agent or log; it gets the same load. "
        "Each phase runs on a fresh server process (and a fresh database), from a copy of the source tree taken at the start of the run.",
        "",
        "### Environment",
        "",
        f"- Date: {report.date}; command: `{report.command}`",
        f"- Machine: {report.machine}",
        *(f"- {line}" for line in report.versions),
        f"- Settings: {report.settings}",
        f"- Run time: {report.run_seconds:.0f}s; load average (1 min) {report.load_start:.1f} at the start, "
        f"{report.load_end:.1f} at the end",
        "",
        "### Results",
        "",
        "Turns/s: completed turns over the time from the start signal to the last user's end. First delta: from "
        "sending the POST to receiving the turn's first `text_delta`. CPU: the server process's, per completed "
        "turn, and its share of one core while the turns ran; the client's share is the load generator's. Alone: "
        "the first-delta p50 of one user's turns on the same server just before the load, unloaded.",
        "",
        "| server | users | streams open | turns ok | errors | turns/s | first delta p50 ms | p99 ms "
        "| POST p50 ms | turn p50 ms | alone: first delta p50 ms | RSS idle / peak MB | server CPU ms/turn "
        "| server CPU | client CPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for phase in sorted(report.phases, key=lambda p: (p.users, p.system != BASELINE, p.system)):
        load = phase.load
        lines.append(
            f"| {phase.system} | {phase.users} | {load.streams_open}/{phase.users} "
            f"| {load.completed_turns}/{phase.users * load.turns_per_user} | {load.error_count} "
            f"| {load.turns_per_second:.1f} | {ms(p50(load.first_delta))} | {ms(p99(load.first_delta))} "
            f"| {ms(p50(load.post_latency))} | {ms(p50(load.turn_latency))} | {ms(p50(phase.alone_first_delta))} "
            f"| {phase.idle_rss_kb / 1024:.0f} / {phase.peak_rss_kb / 1024:.0f} | {phase.cpu_ms_per_turn:.1f} "
            f"| {phase.server_busy:.0%} | {phase.client_busy:.0%} |"
        )
    lines += [
        "",
        "Ours / baseline:",
        "",
        "| database | users | turns/s | first delta p50 | first delta p99 | p50 difference ms |",
        "|---|---|---|---|---|---|",
    ]
    for system in report.systems():
        for users in report.levels():
            ours, base = report.phase(system, users), report.phase(BASELINE, users)
            if ours is None or base is None:
                continue
            o, b = ours.load, base.load
            lines.append(
                f"| {system} | {users} "
                f"| {_ratio(o.turns_per_second / b.turns_per_second if b.turns_per_second else float('nan'))} "
                f"| {_ratio(p50(o.first_delta) / p50(b.first_delta))} "
                f"| {_ratio(p99(o.first_delta) / p99(b.first_delta))} "
                f"| +{ms(p50(o.first_delta) - p50(b.first_delta))} |"
            )
    lines += ["", "### Targets", "", "| target | measured | verdict |", "|---|---|---|"]
    lines += [
        f"| {target} | {measured} | {'PASS' if met else '**FAIL**'} |"
        for target, measured, met in report.verdicts()
    ]
    lines += ["", f"**Verdict: {'PASS' if report.passed else 'FAIL'}**", ""]
    lines += _analysis(report)
    lines += _errors(report)
    if report.failures:
        lines += ["", "Phases that could not run:", "", *(f"- `{failure}`" for failure in report.failures)]
    if report.notes:
        lines += ["", "Notes:", "", *(f"- {note}" for note in report.notes)]
    return "\n".join(lines).rstrip() + "\n"


def _analysis(report: Report) -> list[str]:
    """What dominates, from the measurements: where the server's time goes and what the latency is made of."""
    out: list[str] = []
    for system in report.systems():
        for users in report.levels():
            ours, base = report.phase(system, users), report.phase(BASELINE, users)
            if ours is None or base is None or not ours.load.first_delta or not base.load.first_delta:
                continue
            o, b = ours.load, base.load
            gap = p50(o.first_delta) - p50(b.first_delta)
            if gap <= LATENCY_MARGIN and ours.ok:
                continue
            queue = users / o.turns_per_second if o.turns_per_second else float("nan")
            out.append(
                f"- {system}, {users} users: the server used {ours.cpu_ms_per_turn:.1f} ms of CPU per turn against "
                f"the baseline's {base.cpu_ms_per_turn:.1f} ms ({ours.cpu_ms_per_turn / base.cpu_ms_per_turn:.1f}x) "
                f"and was busy {ours.server_busy:.0%} of a core (the baseline {base.server_busy:.0%}, the client "
                f"{ours.client_busy:.0%} and {base.client_busy:.0%}, on {report.machine.split(';')[0]}). "
                f"In this closed loop a user waits for the turns ahead of it: users / turns/s = {queue:.2f} s, "
                f"against a measured turn p50 of {ms(p50(o.turn_latency))} ms and first-delta p50 of "
                f"{ms(p50(o.first_delta))} ms (POST p50 {ms(p50(o.post_latency))} ms, the baseline's "
                f"{ms(p50(b.post_latency))} ms)."
            )
    for system in report.systems():
        ours = [p.alone_first_delta for p in report.phases if p.system == system]
        base = [p.alone_first_delta for p in report.phases if p.system == BASELINE]
        mine, theirs = [x for xs in ours for x in xs], [x for xs in base for x in xs]
        if out and mine and theirs:
            out.append(
                f"- {system}, one user alone (no queue): first-delta p50 {ms(p50(mine))} ms against the "
                f"baseline's {ms(p50(theirs))} ms (+{ms(p50(mine) - p50(theirs))} ms): what a turn costs before "
                "its first word, without waiting for other users' turns."
            )
    bound = [p for p in report.phases if p.system == BASELINE and p.client_busy > 0.85]
    if out and bound:
        out.append(
            "- The baseline at "
            + ", ".join(f"{p.users} users" for p in bound)
            + " kept the load generator busy (client CPU over 85% of a core): its real capacity is higher "
            "than measured, so those ratios flatter ours."
        )
    if out:
        out = [
            "What dominates where a target is missed (turns run on the server's one event loop; each turn's CPU is "
            "what `run_step` costs, see the step section, plus HTTP, SSE and the runner):",
            "",
            *out,
        ]
    return out


def _errors(report: Report) -> list[str]:
    out: list[str] = []
    for phase in report.phases:
        kinds = ", ".join(
            f"{kind} x{count} (e.g. {phase.load.error_samples[kind][:200]!r})"
            for kind, count in phase.load.errors.items()
        )
        statuses = ", ".join(f"{status} x{count}" for status, count in sorted(phase.statuses.items()))
        if not (kinds or statuses or phase.trouble):
            continue
        out.append(f"- {phase.system}, {phase.users} users: " + "; ".join(filter(None, [kinds, statuses])))
        distinct = list(dict.fromkeys(phase.trouble))
        out += [f"  - server log: `{line[:300]}`" for line in distinct[:8]]
        if len(distinct) > 8:
            out.append(f"  - … {len(distinct) - 8} more distinct lines ({len(phase.trouble)} in all)")
    return (
        ["", "Errors seen (client side, the server's access log, the server's log):", "", *out] if out else []
    )
