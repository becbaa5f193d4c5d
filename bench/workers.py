"""Several server processes on one PostgreSQL database: turns/s and first delta with 1, 2 and 4 workers.

Users spread over the workers round robin; their pools capped to keep `CONNECTIONS` in all; the bare
SSE app as the floor.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from bench.harness.clients import LoadResult
from bench.harness.databases import postgres_version
from bench.harness.options import parser, publish
from bench.harness.phases import BASELINE, Phase, Plan, errors, find, run_plan
from bench.harness.reports import SERVER_PACKAGES, Clock, command_line, environment, section, table
from bench.harness.servers import folder, raise_open_files_limit, snapshot
from bench.harness.stats import median, ms_short, percentile, ratio, times

WORKERS, QUICK_WORKERS = (1, 2, 4), (1, 2)
LEVELS, QUICK_LEVELS = (50, 200), (20,)
LEVEL_TURNS = {50: 2, 200: 1}
BUDGET_SECONDS = 360.0
"""The turns of the last measurements are cut (as errors) rather than let a full run go on past this."""
CONNECTIONS = 60
"""PostgreSQL connections all the workers of one measurement keep together, split evenly between their
two pools each (`DURABLE_CHAT_POOL_SIZE`): one worker's default, and 60% of a default server's 100.
Uncapped, two workers under 200 users exhausted them (`too many clients already`)."""


def render(rows: Sequence[Phase], failures: Sequence[str], environment_lines: Sequence[str]) -> str:
    ordered = sorted(rows, key=lambda r: (r.load.users, r.system != BASELINE, r.workers))
    results = [
        [
            r.system,
            r.workers,
            r.load.users,
            f"{r.load.streams_open}/{r.load.users}",
            f"{r.load.completed_turns}/{r.load.users * r.load.turns_per_user}",
            r.load.error_count,
            f"{r.load.turns_per_second:.1f}",
            ms_short(median(r.load.first_delta)),
            ms_short(percentile(r.load.first_delta, 0.95)),
            ms_short(median(r.load.turn_latency)),
            f"{r.measured.cpu_per_turn * 1000:.1f}",
            f"{r.measured.server_cores:.2f}",
            f"{r.measured.client_cores:.2f}",
            f"{r.measured.machine_busy:.0%}",
            r.connections or "-",
        ]
        for r in ordered
    ]
    against: list[Sequence[object]] = []
    for users in sorted({r.load.users for r in rows}):
        base = find(rows, BASELINE, users)
        one = find(rows, "PostgreSQL", users)
        for r in (r for r in ordered if r.system != BASELINE and r.load.users == users):
            mine, single = r.load, one.load if one else LoadResult(0, 0)
            against.append(
                [
                    users,
                    r.workers,
                    times(ratio(mine.turns_per_second, single.turns_per_second)),
                    *(
                        times(ratio(percentile(mine.first_delta, q), percentile(single.first_delta, q)))
                        for q in (0.5, 0.95)
                    ),
                    times(ratio(mine.turns_per_second, base.load.turns_per_second if base else 0.0)),
                ]
            )
    lines = [
        *section(
            "Workers (PostgreSQL): 1, 2 and 4 server processes on one database",
            "Real server processes (`python -m cli serve --model demo`) on one fresh PostgreSQL database per measurement "
            "(created and dropped by the benchmark), and the simulated users of the web benchmark (`bench/harness/clients.py`) "
            "spread over them round robin: each user creates its thread, opens its event stream and posts its turns "
            '("Where is ORD-5678?", the demo\'s 3-node turn) on one worker, so each worker drives the runs posted to it. '
            "Every turn's events are checked as in the web benchmark. The baseline is the bare Starlette SSE app "
            "(`bench/harness/bare_sse.py`, one process, no database) under the same load. The workers' connection pools "
            "are capped so that together they stay within a share of the server's connections (see Settings): uncapped, "
            "a worker opens up to 60, and two workers under 200 users exhausted a default PostgreSQL's 100 (`too many "
            "clients already`).",
            environment_lines,
        ),
        "Turns/s: completed turns over the time from the start signal to the last user's end. First delta: from "
        "sending the POST to the turn's first `text_delta`. Server CPU: all the workers' processes together, per "
        "turn and in cores while the turns ran; machine: the share of all cores busy meanwhile, whoever used them "
        "(PostgreSQL, the load generator, other jobs). Connections: the most the database had at once.",
        "",
        *table(
            "server | workers | users | streams open | turns ok | errors | turns/s | first delta p50 ms | p95 ms "
            "| turn p50 ms | server CPU ms/turn | server CPU cores | client CPU cores | machine busy | connections",
            results,
        ),
        "",
        "Against 1 worker at the same level (turns/s: higher is better; latency: lower is better), and turns/s "
        "against the baseline:",
        "",
        *table("users | workers | turns/s | first delta p50 | first delta p95 | turns/s / baseline", against),
        *_reading(rows),
        *errors(rows, failures, "Errors seen (client side, the access logs, the servers' logs):"),
    ]
    return "\n".join(lines).rstrip() + "\n"


def _span(values: Iterable[float], spec: str) -> str:
    found = sorted(values)
    low, high = format(found[0], spec), format(found[-1], spec)
    return low if low == high else f"{low}-{high}"


def _reading(rows: Sequence[Phase]) -> list[str]:
    """What the numbers say: how far more workers went, and what held them back."""
    out: list[str] = []
    ours = [r for r in rows if r.system != BASELINE]
    for users in sorted({r.load.users for r in ours}):
        level = [r for r in ours if r.load.users == users]
        one = find(rows, "PostgreSQL", users)
        if one is None or len(level) < 2 or not one.load.turns_per_second:
            continue
        best = max(level, key=lambda r: r.load.turns_per_second)
        alone = (
            f"One worker kept {one.measured.server_cores:.2f} cores busy ({one.measured.cpu_per_turn * 1000:.0f} ms of server CPU per turn) "
            f"with the machine {one.measured.machine_busy:.0%} busy"
        )
        if best is one:
            out.append(
                f"- {users} users: no more workers gave more turns/s than one ({one.load.turns_per_second:.1f}/s). {alone}."
            )
        else:
            out.append(
                f"- {users} users: the most turns/s came with {best.workers} workers, "
                f"{best.load.turns_per_second / one.load.turns_per_second:.2f}x the single worker's "
                f"{one.load.turns_per_second:.1f}/s. {alone}; the {best.workers} workers used {best.measured.server_cores:.2f} cores "
                f"({best.measured.cpu_per_turn * 1000:.0f} ms per turn) and the machine was {best.measured.machine_busy:.0%} busy."
            )
    if any(r.workers > 1 and r.measured.machine_busy >= 0.85 for r in ours):
        out.append(
            "- With more than one worker the machine's cores were saturated: the workers, PostgreSQL and the load "
            "generator share them, so workers beyond the free cores add processes to schedule, not capacity."
        )
    one, more = [r for r in ours if r.workers == 1], [r for r in ours if r.workers > 1]
    if one and more:
        out.append(
            f"- Server CPU per turn: {_span((r.measured.cpu_per_turn * 1000 for r in one), '.0f')} ms with one worker, "
            f"{_span((r.measured.cpu_per_turn * 1000 for r in more), '.0f')} ms with more: each worker has its own pools, caches "
            "and event loop, and more processes on the same cores mean more switching between them."
        )
    return ["", "### Reading", "", *out] if out else []


async def run(arguments: argparse.Namespace, failures: list[str], logs: Path) -> list[Phase]:
    levels = arguments.users or (QUICK_LEVELS if arguments.quick else LEVELS)
    counts = arguments.workers or (QUICK_WORKERS if arguments.quick else WORKERS)
    systems = [(BASELINE, 1)] if arguments.baseline else []
    order = [
        (users, system, n)
        for users in levels
        for system, n in [*systems, *(("PostgreSQL", w) for w in counts)]
    ]
    plan = Plan(order, BUDGET_SECONDS, LEVEL_TURNS, 2, 0.5, pool_connections=CONNECTIONS)
    source = snapshot(logs / "src")
    return await run_plan(
        plan, arguments.turns, failures, postgres=arguments.postgres, logs=logs, source=source
    )


def main() -> int:
    options = parser(
        "bench.workers",
        __doc__,
        quick="1 and 2 workers, 20 users; writes nothing unless --write",
        postgres="required",
    )
    options.add_argument(
        "--workers", type=int, nargs="+", help="numbers of worker processes (default: 1 2 4)"
    )
    options.add_argument("--users", type=int, nargs="+", help="levels of concurrent users (default: 50 200)")
    options.add_argument("--turns", type=int, help="turns per user (default: 2 at 50 users, 1 at 200)")
    options.add_argument("--no-baseline", dest="baseline", action="store_false", help="skip the bare SSE app")
    arguments = options.parse_args()
    if not arguments.postgres:
        options.error("needs a PostgreSQL server: pass --postgres URL or set $DURABLE_CHAT_TEST_POSTGRES_URL")
    limit = raise_open_files_limit()
    clock, failures = Clock(), list[str]()
    version = asyncio.run(postgres_version(arguments.postgres))
    with folder("workers", keep=arguments.keep_logs) as logs:
        rows = asyncio.run(run(arguments, failures, logs))
    turns = arguments.turns or ", ".join(f"{t} at {u} users" for u, t in LEVEL_TURNS.items())
    settings = (
        f"Settings: turns per user {turns}, sent when every user's stream is open, no think time; users spread over "
        "the workers round robin, each posting and following on its own worker; one warm-up turn per worker; per-user "
        f"rate limit raised to 1000/s; open-files limit {limit}; a full run's turns stop after {BUDGET_SECONDS:.0f} s; "
        f"PostgreSQL connections kept at {CONNECTIONS} for all the workers together, split evenly "
        "(`DURABLE_CHAT_POOL_SIZE`, no overflow)"
    )
    command = command_line("bench.workers", sys.argv[1:])
    lines = environment(command, postgres=version, packages=SERVER_PACKAGES, notes=[settings, clock.line()])
    full = not (arguments.quick or arguments.users or arguments.workers)
    publish(arguments, {"workers": render(rows, failures, lines)}, full=full)
    return 0


if __name__ == "__main__":
    sys.exit(main())
