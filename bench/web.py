"""Concurrent users over HTTP and SSE against a real server and a bare Starlette SSE app.

With `--workers`, several server processes on one PostgreSQL database. Each phase on fresh servers and a fresh database, from a copy of the source tree taken at the start.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness.databases import available
from bench.harness.options import parser, publish
from bench.harness.phases import BASELINE, Phase, Plan, errors, find, run_plan
from bench.harness.reports import SERVER_PACKAGES, Clock, command_line, environment, section, table
from bench.harness.servers import folder, raise_open_files_limit, snapshot
from bench.harness.stats import median, ms_short, percentile, ratio, times


@dataclass(frozen=True)
class Mode:
    """What one run measures: `web` (SQLite and PostgreSQL, one server) or `workers` (PostgreSQL, several)."""

    section: str
    levels: Sequence[int]
    quick_levels: Sequence[int]
    turns: dict[int, int]
    default_turns: int
    seconds_per_turn: float
    budget: float
    columns: Sequence[str]
    alone_turns: int = 0
    connections: int | None = None
    """PostgreSQL connections all the workers of one phase keep together, split evenly between their two
    pools each (`DURABLE_CHAT_POOL_SIZE`); uncapped, two workers under 200 users exhaust a default 100."""


WEB = Mode(
    "web", (50, 200, 500), (50,), {50: 3, 200: 3, 500: 1}, 3, 0.3, 450.0,
    ("server", "users", "streams open", "turns ok", "errors", "turns/s", "first delta p50 ms", "p99 ms",
     "POST p50 ms", "turn p50 ms", "alone: first delta p50 ms", "RSS idle / peak MB", "server CPU ms/turn",
     "server CPU", "client CPU"),
    alone_turns=5,
)  # fmt: skip
WORKERS = Mode(
    "workers", (50, 200), (20,), {50: 2, 200: 1}, 2, 0.5, 360.0,
    ("server", "workers", "users", "streams open", "turns ok", "errors", "turns/s", "first delta p50 ms",
     "p95 ms", "turn p50 ms", "server CPU ms/turn", "server CPU cores", "client CPU cores", "machine busy",
     "connections"),
    connections=60,
)  # fmt: skip
WORKER_COUNTS, QUICK_WORKER_COUNTS = (1, 2, 4), (1, 2)
STREAMS_TARGET = 500
LATENCY_MARGIN = 0.010
"""Ours' first-delta p50 may exceed the baseline's by this many seconds."""

COLUMNS: dict[str, Callable[[Phase], object]] = {
    "server": lambda p: p.system,
    "workers": lambda p: p.workers,
    "users": lambda p: p.load.users,
    "streams open": lambda p: f"{p.load.streams_open}/{p.load.users}",
    "turns ok": lambda p: f"{p.load.completed_turns}/{p.load.users * p.load.turns_per_user}",
    "errors": lambda p: p.load.error_count,
    "turns/s": lambda p: f"{p.load.turns_per_second:.1f}",
    "first delta p50 ms": lambda p: ms_short(median(p.load.first_delta)),
    "p95 ms": lambda p: ms_short(percentile(p.load.first_delta, 0.95)),
    "p99 ms": lambda p: ms_short(percentile(p.load.first_delta, 0.99)),
    "POST p50 ms": lambda p: ms_short(median(p.load.post_latency)),
    "turn p50 ms": lambda p: ms_short(median(p.load.turn_latency)),
    "alone: first delta p50 ms": lambda p: ms_short(median(p.alone)),
    "RSS idle / peak MB": lambda p: f"{p.idle_rss_kb / 1024:.0f} / {p.peak_rss_kb / 1024:.0f}",
    "server CPU ms/turn": lambda p: f"{p.measured.cpu_per_turn * 1000:.1f}",
    "server CPU": lambda p: f"{p.measured.server_cores:.0%}",
    "client CPU": lambda p: f"{p.measured.client_cores:.0%}",
    "server CPU cores": lambda p: f"{p.measured.server_cores:.2f}",
    "client CPU cores": lambda p: f"{p.measured.client_cores:.2f}",
    "machine busy": lambda p: f"{p.measured.machine_busy:.0%}",
    "connections": lambda p: p.connections or "-",
}


@dataclass
class Report:
    phases: list[Phase] = field(default_factory=list[Phase])
    failures: list[str] = field(default_factory=list[str])
    """Phases that could not run (a server that did not start)."""

    @staticmethod
    def ok(phase: Phase) -> bool:
        load = phase.load
        return not load.errors and load.completed_turns == load.users * load.turns_per_user == (
            load.streams_open * load.turns_per_user
        )

    def systems(self) -> list[str]:
        return list(dict.fromkeys(p.system for p in self.phases if p.system != BASELINE))

    def pairs(self, system: str) -> list[tuple[int, Phase, Phase]]:
        """(users, ours with one worker, the baseline) for every level both measured."""
        found = [
            (u, find(self.phases, system, u), find(self.phases, BASELINE, u))
            for u in sorted({p.load.users for p in self.phases})
        ]
        return [(u, o, b) for u, o, b in found if o is not None and b is not None]

    def verdicts(self) -> list[tuple[str, str, bool]]:
        """(target, measured, met) for every target measured."""
        rows: list[tuple[str, str, bool]] = []
        for system in self.systems():
            if (held := find(self.phases, system, STREAMS_TARGET)) is not None:
                load = held.load
                measured = f"{load.streams_open}/{load.users} streams open, {load.completed_turns}/{load.users * load.turns_per_user} turns, {load.error_count} errors"
                rows.append(
                    (f"{system}: {STREAMS_TARGET} concurrent streams held, no error", measured, self.ok(held))
                )
            for users, ours, base in self.pairs(system):
                mine, theirs = median(ours.load.first_delta), median(base.load.first_delta)
                target = f"{system}, {users} users: first-delta p50 within {LATENCY_MARGIN * 1000:.0f} ms of the baseline"
                measured = f"{ms_short(mine)} vs {ms_short(theirs)} ms (+{ms_short(mine - theirs)} ms)"
                rows.append((target, measured, mine - theirs <= LATENCY_MARGIN))
        return rows

    @property
    def passed(self) -> bool:
        verdicts = self.verdicts()
        return bool(verdicts) and all(met for _, _, met in verdicts) and not self.failures


def _against_baseline(report: Report) -> list[str]:
    rows = [
        [
            system,
            users,
            times(ratio(ours.load.turns_per_second, base.load.turns_per_second)),
            *(
                times(ratio(percentile(ours.load.first_delta, q), percentile(base.load.first_delta, q)))
                for q in (0.5, 0.99)
            ),
            f"+{ms_short(median(ours.load.first_delta) - median(base.load.first_delta))}",
        ]
        for system in report.systems()
        for users, ours, base in report.pairs(system)
    ]
    verdicts = [(t, m, "PASS" if ok else "**FAIL**") for t, m, ok in report.verdicts()]
    return [
        "Ours / baseline:",
        "",
        *table("database | users | turns/s | first delta p50 | first delta p99 | p50 difference ms", rows),
        "",
        "### Targets",
        "",
        *table(["target", "measured", "verdict"], verdicts),
        "",
        f"**Verdict: {'PASS' if report.passed else 'FAIL'}**",
    ]


def _against_one_worker(phases: Sequence[Phase]) -> list[str]:
    rows: list[Sequence[object]] = []
    for users in sorted({p.load.users for p in phases}):
        base, one = find(phases, BASELINE, users), find(phases, "PostgreSQL", users)
        for p in (p for p in phases if p.system != BASELINE and p.load.users == users):
            single = one.load if one else None
            rows.append(
                [
                    users,
                    p.workers,
                    times(ratio(p.load.turns_per_second, single.turns_per_second if single else 0.0)),
                    *(
                        times(
                            ratio(
                                percentile(p.load.first_delta, q),
                                percentile(single.first_delta, q) if single else 0.0,
                            )
                        )
                        for q in (0.5, 0.95)
                    ),
                    times(ratio(p.load.turns_per_second, base.load.turns_per_second if base else 0.0)),
                ]
            )
    return [
        "Against 1 worker at the same level (turns/s: higher is better; latency: lower is better), and turns/s "
        "against the baseline:",
        "",
        *table("users | workers | turns/s | first delta p50 | first delta p95 | turns/s / baseline", rows),
    ]


def render(mode: Mode, report: Report, environment_lines: Sequence[str]) -> str:
    phases = sorted(report.phases, key=lambda p: (p.load.users, p.system != BASELINE, p.system, p.workers))
    results = [[COLUMNS[name](p) for name in mode.columns] for p in phases]
    lines = [
        *section(environment_lines),
        *table(list(mode.columns), results),
        "",
        *(_against_one_worker(phases) if mode is WORKERS else _against_baseline(report)),
        *errors(
            report.phases,
            report.failures,
            "Errors seen (client side, the servers' access logs, the servers' logs):",
        ),
    ]
    return "\n".join(lines).rstrip() + "\n"


def _plan(mode: Mode, arguments: argparse.Namespace, databases: Sequence[str]) -> Plan:
    levels = arguments.users or (mode.quick_levels if arguments.quick else mode.levels)
    baseline = [(BASELINE, 1)] if arguments.baseline else []
    if mode is WORKERS:
        counts = arguments.workers or (QUICK_WORKER_COUNTS if arguments.quick else WORKER_COUNTS)
        systems = [*baseline, *(("PostgreSQL", n) for n in counts)]
        order = [(users, system, n) for users in levels for system, n in systems]
    else:
        # Alternate which side goes first, so a drift in the machine's load spreads over both.
        systems = [*baseline, *((database, 1) for database in databases)]
        order = [
            (users, system, n)
            for i, users in enumerate(levels)
            for system, n in systems[:: 1 if i % 2 == 0 else -1]
        ]
    return Plan(
        order,
        mode.budget,
        mode.turns,
        mode.default_turns,
        mode.seconds_per_turn,
        alone_turns=mode.alone_turns,
        pool_connections=mode.connections,
    )


async def run(
    mode: Mode, arguments: argparse.Namespace, report: Report, notes: list[str], logs: Path
) -> str | None:
    databases, version = await available(arguments.postgres, notes)
    plan = _plan(mode, arguments, databases)
    source = snapshot(logs / "src")
    report.phases += await run_plan(
        plan, arguments.turns, report.failures, postgres=arguments.postgres, logs=logs, source=source
    )
    return version


def main() -> int:
    options = parser(
        "bench.web", __doc__, quick="50 users (with --workers: 1 and 2 workers, 20 users)", strict=True
    )
    options.add_argument(
        "--workers",
        type=int,
        nargs="*",
        help="several servers on one PostgreSQL database: these numbers of them (alone: 1 2 4); writes `workers`",
    )
    options.add_argument(
        "--users",
        type=int,
        nargs="+",
        help="levels of concurrent users (default: 50 200 500; --workers: 50 200)",
    )
    options.add_argument(
        "--turns", type=int, help="turns per user (default: 3, 1 at 500; --workers: 2, 1 at 200)"
    )
    options.add_argument("--no-baseline", dest="baseline", action="store_false", help="skip the bare SSE app")
    arguments = options.parse_args()
    mode = WEB if arguments.workers is None else WORKERS
    if mode is WORKERS and not arguments.postgres:
        options.error(
            "--workers needs PostgreSQL: pass --postgres URL or set $DURABLE_CHAT_TEST_POSTGRES_URL"
        )
    limit = raise_open_files_limit()
    clock, report, notes = Clock(), Report(), list[str]()
    with folder(mode.section, keep=arguments.keep_logs) as logs:
        version = asyncio.run(run(mode, arguments, report, notes, logs))
    turns = arguments.turns or ", ".join(f"{count} at {users} users" for users, count in mode.turns.items())
    spread = (
        "users spread over the workers round robin, each posting and following on its own worker; one warm-up "
        f"turn per worker; PostgreSQL connections kept at {mode.connections} for all the workers together, split "
        "evenly (`DURABLE_CHAT_POOL_SIZE`, no overflow)"
        if mode is WORKERS
        else f"per server, one warm-up turn, then {mode.alone_turns} turns of one user alone"
    )
    settings = (
        f"Settings: turns per user {turns}, sent when every user's stream is open, no think time; {spread}; "
        f"per-user rate limit raised to 1000/s; open-files limit {limit}; a full run's turns stop after "
        f"{mode.budget:.0f} s"
    )
    command = command_line("bench.web", sys.argv[1:])
    lines = environment(
        command, postgres=version, packages=SERVER_PACKAGES, notes=[settings, *notes, clock.line()]
    )
    full = not (arguments.quick or arguments.users or arguments.turns or arguments.workers)
    publish(arguments, {mode.section: render(mode, report, lines)}, full=full)
    return 1 if arguments.strict and mode is WEB and not report.passed else 0


if __name__ == "__main__":
    sys.exit(main())
