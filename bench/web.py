"""Concurrent users over HTTP and SSE against a real server: 50, 200 and 500 users, SQLite and PostgreSQL;
each phase on a fresh server and database, from a copy of the source tree taken at the start."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from bench.harness.clients import Load, LoadResult, Measured, measure, run_load
from bench.harness.databases import Dialect, available, scratch_database
from bench.harness.options import parser, publish
from bench.harness.reports import SERVER_PACKAGES, Clock, command_line, environment, section, table
from bench.harness.servers import folder, ours_argv, raise_open_files_limit, server_env, serving, snapshot
from bench.harness.stats import median, ms_short, percentile

LEVELS, QUICK_LEVELS = (50, 200, 500), (50,)
TURNS, DEFAULT_TURNS = {50: 3, 200: 3, 500: 1}, 3
SECONDS_PER_TURN, BUDGET, ALONE_TURNS = 0.3, 450.0, 5
STREAMS_TARGET = 500


@dataclass
class Phase:
    """Ours on one database (`SQLite` or `PostgreSQL`) at one level of users."""

    system: str
    measured: Measured
    idle_rss_kb: int = 0
    peak_rss_kb: int = 0
    """The server's resident memory before the load and at its peak."""
    alone: list[float] = field(default_factory=list[float])
    """First-delta latencies of one user alone on the server, before the load."""
    trouble: list[str] = field(default_factory=list[str])
    statuses: dict[str, int] = field(default_factory=dict[str, int])

    @property
    def load(self) -> LoadResult:
        return self.measured.result

    @property
    def label(self) -> str:
        return f"{self.system}, {self.load.users} users"


async def run_phase(
    system: Dialect, users: int, turns: int, deadline: float, postgres: str | None, logs: Path, source: Path
) -> Phase:
    """A fresh server (and database) warmed up by a turn, one user's `ALONE_TURNS`, then `users` users'
    `turns` each."""
    tag = f"{system}-{users}u"
    async with AsyncExitStack() as stack:
        url = await stack.enter_async_context(scratch_database(system, logs, tag, postgres))
        server = await stack.enter_async_context(serving(tag, ours_argv(url), server_env(), logs, cwd=source))
        warm = await run_load(server.base_url, Load(users=1, turns=1, deadline=60))
        alone = await run_load(server.base_url, Load(users=1, turns=ALONE_TURNS, deadline=60))
        await asyncio.sleep(0.5)
        idle = server.status("VmRSS") or 0
        measured = await measure([server], Load(users=users, turns=turns, deadline=deadline))
        high = server.status("VmHWM") or 0
    phase = Phase(system, measured, idle, high, alone.first_delta)
    measured.result.add_errors(warm, "warm-up: ")
    measured.result.add_errors(alone, "alone: ")
    phase.trouble, phase.statuses = server.trouble()
    load = phase.load
    print(
        f"  {phase.label}: {load.completed_turns}/{users * turns} turns in {load.elapsed:.1f}s = "
        f"{load.turns_per_second:.1f}/s, first delta p50 {ms_short(median(load.first_delta))} p95 "
        f"{ms_short(percentile(load.first_delta, 0.95))} ms, {load.error_count} errors, streams "
        f"{load.streams_open}, server CPU {measured.server_cores:.2f} cores, client {measured.client_cores:.0%}, "
        f"machine {measured.machine_busy:.0%}",
        flush=True,
    )
    for kind, count in load.errors.items():
        print(f"    error {kind} x{count}: {load.error_samples[kind]}", flush=True)
    return phase


def errors(phases: Sequence[Phase], failures: Sequence[str], heading: str) -> list[str]:
    """What went wrong, under `heading`: per phase, the clients' errors by kind, the access log's non-2xx
    answers by status and (a few of) the server's log lines; then the phases that could not run."""
    out: list[str] = []
    for phase in phases:
        kinds = [
            f"{kind} x{n} (e.g. {phase.load.error_samples[kind][:200]!r})"
            for kind, n in phase.load.errors.items()
        ]
        kinds += [f"{status} x{count}" for status, count in sorted(phase.statuses.items())]
        if kinds or phase.trouble:
            logged = (f"  - server log: `{line[:300]}`" for line in dict.fromkeys(phase.trouble))
            out += [f"- {phase.label}: " + "; ".join(kinds), *logged][:9]
    out += [f"- could not run: `{failure}`" for failure in failures]
    return ["", heading, "", *out] if out else []


COLUMNS: dict[str, Callable[[Phase], object]] = {
    "server": lambda p: p.system,
    "users": lambda p: p.load.users,
    "streams open": lambda p: f"{p.load.streams_open}/{p.load.users}",
    "turns ok": lambda p: f"{p.load.completed_turns}/{p.load.users * p.load.turns_per_user}",
    "errors": lambda p: p.load.error_count,
    "turns/s": lambda p: f"{p.load.turns_per_second:.1f}",
    "first delta p50 ms": lambda p: ms_short(median(p.load.first_delta)),
    "p99 ms": lambda p: ms_short(percentile(p.load.first_delta, 0.99)),
    "POST p50 ms": lambda p: ms_short(median(p.load.post_latency)),
    "turn p50 ms": lambda p: ms_short(median(p.load.turn_latency)),
    "alone: first delta p50 ms": lambda p: ms_short(median(p.alone)),
    "RSS idle / peak MB": lambda p: f"{p.idle_rss_kb / 1024:.0f} / {p.peak_rss_kb / 1024:.0f}",
    "server CPU ms/turn": lambda p: f"{p.measured.cpu_per_turn * 1000:.1f}",
    "server CPU": lambda p: f"{p.measured.server_cores:.0%}",
    "client CPU": lambda p: f"{p.measured.client_cores:.0%}",
}


@dataclass
class Report:
    phases: list[Phase] = field(default_factory=list[Phase])
    failures: list[str] = field(default_factory=list[str])
    """Phases that could not run (a server that did not start)."""

    def verdicts(self) -> list[tuple[str, str, bool]]:
        """(target, measured, met) for every database measured at `STREAMS_TARGET` users."""
        rows: list[tuple[str, str, bool]] = []
        for system in dict.fromkeys(p.system for p in self.phases):
            held = [p.load for p in self.phases if (p.system, p.load.users) == (system, STREAMS_TARGET)]
            if held:
                load = held[0]
                wanted = load.users * load.turns_per_user
                measured = f"{load.streams_open}/{load.users} streams open, {load.completed_turns}/{wanted} turns, {load.error_count} errors"
                ok = (
                    not load.errors
                    and load.completed_turns == wanted == load.streams_open * load.turns_per_user
                )
                rows.append((f"{system}: {STREAMS_TARGET} concurrent streams held, no error", measured, ok))
        return rows

    @property
    def passed(self) -> bool:
        verdicts = self.verdicts()
        return bool(verdicts) and all(met for _, _, met in verdicts) and not self.failures


def render(report: Report, environment_lines: Sequence[str]) -> str:
    phases = sorted(report.phases, key=lambda p: (p.load.users, p.system))
    verdicts = [(t, m, "PASS" if ok else "**FAIL**") for t, m, ok in report.verdicts()]
    lines = [
        *section(environment_lines),
        *table(list(COLUMNS), [[column(p) for column in COLUMNS.values()] for p in phases]),
        "",
        "### Targets",
        "",
        *(table(["target", "measured", "verdict"], verdicts) if verdicts else ["Not measured at 500 users."]),
        "",
        f"**Verdict: {'PASS' if report.passed else 'FAIL'}**",
        *errors(
            report.phases, report.failures, "Errors seen (client side, the server's access log, its log):"
        ),
    ]
    return "\n".join(lines).rstrip() + "\n"


async def run(arguments: argparse.Namespace, report: Report, notes: list[str], logs: Path) -> str | None:
    """Every phase in order, each cut to leave 15 s to every later one within `BUDGET`; a phase that
    cannot run is noted, not fatal."""
    databases, version = await available(arguments.postgres, notes)
    levels = arguments.users or (QUICK_LEVELS if arguments.quick else LEVELS)
    # Alternate which database goes first, so a drift in the machine's load spreads over both.
    order: list[tuple[int, Dialect]] = [
        (users, db) for i, users in enumerate(levels) for db in databases[:: 1 if i % 2 == 0 else -1]
    ]
    source = snapshot(logs / "src")
    budget_end = time.monotonic() + BUDGET
    for number, (users, system) in enumerate(order):
        each = arguments.turns or TURNS.get(users, DEFAULT_TURNS)
        if number == 0 or order[number - 1][0] != users:
            print(f"{users} concurrent users, {each} turns each:", flush=True)
        left = budget_end - time.monotonic() - 15 * (len(order) - number - 1)
        deadline = max(20.0, min(users * each * SECONDS_PER_TURN, left))
        try:
            report.phases.append(
                await run_phase(system, users, each, deadline, arguments.postgres, logs, source)
            )
        except (RuntimeError, OSError, SQLAlchemyError) as error:
            print(f"  {system}, {users} users: FAILED: {error}", flush=True)
            report.failures.append(f"{system}, {users} users: {str(error)[-600:]}")
    return version


def main() -> int:
    options = parser("bench.web", __doc__, quick="50 users", strict=True)
    options.add_argument(
        "--users", type=int, nargs="+", help="levels of concurrent users (default: 50 200 500)"
    )
    options.add_argument("--turns", type=int, help="turns per user (default: 3, 1 at 500)")
    arguments = options.parse_args()
    limit = raise_open_files_limit()
    clock, report, notes = Clock(), Report(), list[str]()
    with folder("web", keep=arguments.keep_logs) as logs:
        version = asyncio.run(run(arguments, report, notes, logs))
    turns = arguments.turns or ", ".join(f"{count} at {users} users" for users, count in TURNS.items())
    settings = (
        f"Settings: turns per user {turns}, sent when every user's stream is open, no think time; per server, "
        f"one warm-up turn, then {ALONE_TURNS} turns of one user alone; per-user rate limit raised to 1000/s; "
        f"open-files limit {limit}; a full run's turns stop after {BUDGET:.0f} s"
    )
    lines = environment(
        command_line("bench.web", sys.argv[1:]),
        postgres=version,
        packages=SERVER_PACKAGES,
        notes=[settings, *notes, clock.line()],
    )
    full = not (arguments.quick or arguments.users or arguments.turns)
    publish(arguments, {"web": render(report, lines)}, full=full)
    return 1 if arguments.strict and not report.passed else 0


if __name__ == "__main__":
    sys.exit(main())
