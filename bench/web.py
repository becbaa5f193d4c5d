"""Concurrent users over HTTP and SSE against a real server: 50, 200 and 500 users, SQLite and PostgreSQL.

Each phase on a fresh server and a fresh database, from a copy of the source tree taken at the start.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from bench.harness.databases import Dialect, available
from bench.harness.options import parser, publish
from bench.harness.phases import Phase, errors, find, run_phase
from bench.harness.reports import SERVER_PACKAGES, Clock, command_line, environment, section, table
from bench.harness.servers import folder, raise_open_files_limit, snapshot
from bench.harness.stats import median, ms_short, percentile

LEVELS, QUICK_LEVELS = (50, 200, 500), (50,)
TURNS, DEFAULT_TURNS = {50: 3, 200: 3, 500: 1}, 3
SECONDS_PER_TURN, BUDGET, ALONE_TURNS = 0.3, 450.0, 5
STREAMS_TARGET = 500

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
            if (held := find(self.phases, system, STREAMS_TARGET)) is not None:
                load, wanted = held.load, held.load.users * held.load.turns_per_user
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
            phase = await run_phase(
                system, users, each, deadline, arguments.postgres, logs, source, ALONE_TURNS
            )
            report.phases.append(phase)
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
