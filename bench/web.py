"""The server under concurrent users over HTTP and SSE, against a bare Starlette SSE app.

Each phase on a fresh server and database, from a copy of the source tree taken at the start.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness.databases import available
from bench.harness.options import parser, publish
from bench.harness.phases import BASELINE, Phase, Plan, errors, find, run_plan
from bench.harness.reports import SERVER_PACKAGES, Clock, command_line, environment, section, table
from bench.harness.servers import folder, raise_open_files_limit, snapshot
from bench.harness.stats import median, ms_short, percentile, ratio, times

LEVELS, QUICK_LEVELS = (50, 200, 500), (50,)
LEVEL_TURNS = {50: 3, 200: 3, 500: 1}
"""Turns per user at each level: 500 users take one turn each, so that a full run stays under ~8 minutes."""
BUDGET_SECONDS = 450.0
"""The turns of the last phases are cut (as errors) rather than let a full run go on past this."""
ALONE_TURNS = 5
"""Turns of a single user before the load: the first-delta latency of an unloaded server."""
STREAMS_TARGET = 500
LATENCY_MARGIN = 0.010
"""Ours' first-delta p50 may exceed the baseline's by this many seconds."""


@dataclass
class Report:
    phases: list[Phase] = field(default_factory=list[Phase])
    failures: list[str] = field(default_factory=list[str])
    """Phases that could not run (a server that did not start)."""

    def phase(self, system: str, users: int) -> Phase | None:
        return find(self.phases, system, users)

    @staticmethod
    def ok(phase: Phase) -> bool:
        load = phase.load
        return not load.errors and load.completed_turns == load.users * load.turns_per_user == (
            load.streams_open * load.turns_per_user
        )

    def systems(self) -> list[str]:
        return list(dict.fromkeys(p.system for p in self.phases if p.system != BASELINE))

    def pairs(self, system: str) -> list[tuple[int, Phase, Phase]]:
        """(users, ours, the baseline) for every level both measured."""
        found = [
            (u, self.phase(system, u), self.phase(BASELINE, u))
            for u in sorted({p.load.users for p in self.phases})
        ]
        return [(u, o, b) for u, o, b in found if o is not None and b is not None]

    def verdicts(self) -> list[tuple[str, str, bool]]:
        """(target, measured, met) for every target measured."""
        rows: list[tuple[str, str, bool]] = []
        for system in self.systems():
            if (held := self.phase(system, STREAMS_TARGET)) is not None:
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


def render(report: Report, environment_lines: Sequence[str]) -> str:
    rows = [
        [
            p.system,
            p.load.users,
            f"{p.load.streams_open}/{p.load.users}",
            f"{p.load.completed_turns}/{p.load.users * p.load.turns_per_user}",
            p.load.error_count,
            f"{p.load.turns_per_second:.1f}",
            *(
                ms_short(value)
                for value in (median(p.load.first_delta), percentile(p.load.first_delta, 0.99))
            ),
            *(ms_short(median(values)) for values in (p.load.post_latency, p.load.turn_latency, p.alone)),
            f"{p.idle_rss_kb / 1024:.0f} / {p.peak_rss_kb / 1024:.0f}",
            f"{p.measured.cpu_per_turn * 1000:.1f}",
            f"{p.measured.server_cores:.0%}",
            f"{p.measured.client_cores:.0%}",
        ]
        for p in sorted(report.phases, key=lambda p: (p.load.users, p.system != BASELINE, p.system))
    ]
    ratios = [
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
    lines = [
        *section(
            "Web: concurrent users over HTTP and SSE against a bare Starlette SSE app",
            "A real server process (`python -m cli serve --model demo`) and simulated users in the benchmark process "
            "(asyncio, an `httpx.AsyncClient` per user, loopback). Each user creates a thread, opens its event stream "
            "(`GET /api/threads/{id}/events`) and keeps it open; when every stream is open, all users send "
            '"Where is ORD-5678?" (the demo\'s 3-node turn: model, `lookup_order`, model) turn after turn: '
            "`POST …/messages`, then the stream up to `run_finished`. Every turn's events are checked (increasing ids, "
            "the demo turn's shape, its `run_id`, `text_done` equal to its deltas). The baseline "
            "(`bench/harness/bare_sse.py`) is a Starlette app on the same uvicorn and sse-starlette with the same routes, "
            "tokens and events, published from memory with no database, agent or log; it gets the same load. Each phase "
            "runs on a fresh server process (and a fresh database), from a copy of the source tree taken at the start of "
            "the run.",
            environment_lines,
        ),
        "Turns/s: completed turns over the time from the start signal to the last user's end. First delta: from "
        "sending the POST to receiving the turn's first `text_delta`. CPU: the server process's, per completed "
        "turn, and its share of one core while the turns ran; the client's share is the load generator's. Alone: "
        "the first-delta p50 of one user's turns on the same server just before the load, unloaded.",
        "",
        *table(
            "server | users | streams open | turns ok | errors | turns/s | first delta p50 ms | p99 ms | POST p50 ms "
            "| turn p50 ms | alone: first delta p50 ms | RSS idle / peak MB | server CPU ms/turn | server CPU | client CPU",
            rows,
        ),
        "",
        "Ours / baseline:",
        "",
        *table("database | users | turns/s | first delta p50 | first delta p99 | p50 difference ms", ratios),
        "",
        "### Targets",
        "",
        *table(
            ["target", "measured", "verdict"],
            [(t, m, "PASS" if ok else "**FAIL**") for t, m, ok in report.verdicts()],
        ),
        "",
        f"**Verdict: {'PASS' if report.passed else 'FAIL'}**",
        *_analysis(report),
        *errors(
            report.phases,
            report.failures,
            "Errors seen (client side, the server's access log, the server's log):",
        ),
    ]
    return "\n".join(lines).rstrip() + "\n"


def _analysis(report: Report) -> list[str]:
    """What dominates where a target is missed: the server's CPU, and the queue a closed loop makes."""
    out: list[str] = []
    for system, users, ours, base in ((s, *pair) for s in report.systems() for pair in report.pairs(s)):
        o, b, om, bm = ours.load, base.load, ours.measured, base.measured
        if median(o.first_delta) - median(b.first_delta) <= LATENCY_MARGIN and report.ok(ours):
            continue
        out.append(
            f"- {system}, {users} users: the server used {om.cpu_per_turn * 1000:.1f} ms of CPU per turn against "
            f"the baseline's {bm.cpu_per_turn * 1000:.1f} ms ({om.cpu_per_turn / bm.cpu_per_turn:.1f}x) and was "
            f"busy {om.server_cores:.0%} of a core (the baseline {bm.server_cores:.0%}, the client "
            f"{om.client_cores:.0%} and {bm.client_cores:.0%}). In this closed loop a user waits for the turns "
            f"ahead of it: users / turns/s = {ratio(users, o.turns_per_second):.2f} s, against a measured turn p50 of "
            f"{ms_short(median(o.turn_latency))} ms and first-delta p50 of {ms_short(median(o.first_delta))} ms "
            f"(POST p50 {ms_short(median(o.post_latency))} ms, the baseline's {ms_short(median(b.post_latency))} ms)."
        )
    base = [x for p in report.phases if p.system == BASELINE for x in p.alone]
    for system in report.systems():
        mine = [x for p in report.phases if p.system == system for x in p.alone]
        if out and mine and base:
            out.append(
                f"- {system}, one user alone (no queue): first-delta p50 {ms_short(median(mine))} ms against the "
                f"baseline's {ms_short(median(base))} ms (+{ms_short(median(mine) - median(base))} ms): what a turn "
                "costs before its first word, without waiting for other users' turns."
            )
    if out and (
        bound := [p for p in report.phases if p.system == BASELINE and p.measured.client_cores > 0.85]
    ):
        out.append(
            f"- The baseline at {', '.join(f'{p.load.users} users' for p in bound)} kept the load generator busy (client "
            "CPU over 85% of a core): its real capacity is higher than measured, so those ratios flatter ours."
        )
    if not out:
        return []
    intro = (
        "What dominates where a target is missed (turns run on the server's one event loop; each turn's CPU is "
        "what `run_step` costs, see the step section, plus HTTP, SSE and the runner):"
    )
    return ["", intro, "", *out]


async def run(arguments: argparse.Namespace, report: Report, notes: list[str], logs: Path) -> str | None:
    databases, version = await available(arguments.postgres, notes)
    systems = [BASELINE, *databases]
    levels = arguments.users or (QUICK_LEVELS if arguments.quick else LEVELS)
    # Alternate which side goes first, so a drift in the machine's load spreads over both.
    order = [
        (users, system, 1) for n, users in enumerate(levels) for system in systems[:: 1 if n % 2 == 0 else -1]
    ]
    plan = Plan(order, BUDGET_SECONDS, LEVEL_TURNS, 3, 0.3, alone_turns=ALONE_TURNS)
    source = snapshot(logs / "src")
    found = await run_plan(
        plan, arguments.turns, report.failures, postgres=arguments.postgres, logs=logs, source=source
    )
    report.phases += found
    return version


def main() -> int:
    options = parser(
        "bench.web", __doc__, quick="50 users only (<60 s); writes nothing unless --write", strict=True
    )
    options.add_argument(
        "--users", type=int, nargs="+", help="levels of concurrent users (default: 50 200 500)"
    )
    options.add_argument(
        "--turns", type=int, help="turns per user (default: 3 at 50 and 200 users, 1 at 500)"
    )
    arguments = options.parse_args()
    limit = raise_open_files_limit()
    clock, report, notes = Clock(), Report(), list[str]()
    with folder("web", keep=arguments.keep_logs) as logs:
        version = asyncio.run(run(arguments, report, notes, logs))
    turns = arguments.turns or ", ".join(f"{count} at {users} users" for users, count in LEVEL_TURNS.items())
    settings = (
        f"Settings: turns per user {turns}, sent when every user's stream is open, no think time; per server, one "
        f"warm-up turn, then {ALONE_TURNS} turns of one user alone; per-user rate limit raised to 1000/s; open-files "
        f"limit {limit}; a full run's turns stop after {BUDGET_SECONDS:.0f} s"
    )
    command = command_line("bench.web", sys.argv[1:])
    lines = environment(
        command, postgres=version, packages=SERVER_PACKAGES, notes=[settings, *notes, clock.line()]
    )
    publish(
        arguments,
        {"web": render(report, lines)},
        full=not (arguments.quick or arguments.users or arguments.turns),
    )
    return 1 if arguments.strict and not report.passed else 0


if __name__ == "__main__":
    sys.exit(main())
