"""Server CPU per turn, and the first delta, of ours against pydantic-ai's own adapter on the same agent.

Both pinned to core 1, the clients on core 0, the sides rotating round by round (`bench/README.md`).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path

from bench.cpu_report import AI_SDK, BASELINE, NATIVE, SIDES, Report, Round, render_cpu, render_first_delta
from bench.harness.clients import Load, Measured, Protocol, measure
from bench.harness.databases import Dialect, available, prepare_shop, scratch_database
from bench.harness.options import parser, publish
from bench.harness.reports import Clock, command_line, environment
from bench.harness.servers import (
    PLAIN_APP,
    UNLIMITED,
    ServerProcess,
    adapter_argv,
    folder,
    ours_argv,
    pin_this_process,
    pinned,
    raise_open_files_limit,
    server_env,
    serving,
    snapshot,
)
from bench.harness.stats import rotated

LEVELS, QUICK_LEVELS = (20, 200), (20,)
ROUNDS, QUICK_ROUNDS = 3, 2
SECONDS, QUICK_SECONDS = 3.0, 2.0
ALONE_TURNS, QUICK_ALONE_TURNS = 15, 4
BUDGET, QUICK_BUDGET = 360.0, 30.0
"""Seconds for all the rounds of a run, shared equally by every (database, users) cell: a cell starts
no new round (of all three sides) that it would likely finish past its share, but runs one at least."""
SETTLE = 1.2
"""Seconds after a round's last turn before its CPU is read: the trace exporter's 1 s batch lands in it."""
PROTOCOLS: dict[str, Protocol] = {BASELINE: "ai-sdk", NATIVE: "native", AI_SDK: "ai-sdk"}


PER_THREAD = 5
"""The plain app's turns per thread (`--app plain`): a new thread and its stream every 5 turns."""


async def servers(
    stack: AsyncExitStack, database: Dialect, postgres: str | None, source: Path, logs: Path, *, plain: bool
) -> dict[str, ServerProcess]:
    """Ours and the baseline, pinned, each on a scratch database of its own; by side."""
    urls = {
        name: await stack.enter_async_context(
            scratch_database(database, logs, f"{name}-{database}", postgres)
        )
        for name in ("ours", "baseline")
    }
    await prepare_shop(urls["baseline"])
    argv = {
        "ours": ours_argv(urls["ours"], app=PLAIN_APP if plain else None),
        "baseline": adapter_argv(urls["baseline"], app="plain" if plain else "shop"),
    }
    found: dict[str, ServerProcess] = {}
    for name, command in argv.items():
        serve = serving(f"{name}-{database}", pinned(command), server_env(UNLIMITED), logs, cwd=source)
        found[name] = await stack.enter_async_context(serve)
    return {BASELINE: found["baseline"], NATIVE: found["ours"], AI_SDK: found["ours"]}


async def play(
    server: ServerProcess,
    side: str,
    users: int,
    *,
    turns: int | None = None,
    seconds: float = 0.0,
    per_thread: int | None = None,
) -> Measured:
    """A round of `side`: `turns` each, or turns for `seconds`, its CPU read `SETTLE` after a timed round;
    a new thread every `per_thread` turns."""
    load = Load(users, turns, seconds, PROTOCOLS[side], deadline=600, turns_per_thread=per_thread)
    return await measure([server], load, settle=0.0 if turns else SETTLE)


async def run_database(
    database: Dialect, arguments: argparse.Namespace, report: Report, source: Path, logs: Path, share: float
) -> None:
    quick = arguments.quick
    async with AsyncExitStack() as stack:
        plain = arguments.app == "plain"
        per_thread = PER_THREAD if plain else None
        by_side = await servers(stack, database, arguments.postgres, source, logs, plain=plain)
        for side in SIDES:  # warm-up: imports, first connections, caches
            await play(by_side[side], side, 2, turns=3)
        for turn in range(QUICK_ALONE_TURNS if quick else ALONE_TURNS):
            for side in rotated(SIDES, turn):
                result = (await play(by_side[side], side, 1, turns=1)).result
                report.alone.setdefault((database, side), []).extend(result.first_delta)
                _count(report, database, side, result.errors, result.error_samples)
        rounds = arguments.rounds or (QUICK_ROUNDS if quick else ROUNDS)
        seconds = arguments.seconds or (QUICK_SECONDS if quick else SECONDS)
        for users in arguments.users or (QUICK_LEVELS if quick else LEVELS):
            started = time.monotonic()
            for number in range(rounds):
                if number and (time.monotonic() - started) * (number + 1) / number > share:
                    notes = f"{database}, {users} users: {number} of {rounds} rounds, the time budget's share ({share:.0f} s) spent"
                    report.notes.append(notes)
                    break
                for side in rotated(SIDES, number):
                    m = await play(by_side[side], side, users, seconds=seconds, per_thread=per_thread)
                    load, busy = m.result, m.result.elapsed or 1e-9
                    _count(report, database, side, load.errors, load.error_samples)
                    report.rounds.append(found := Round(database, users, side, number, m))
                    print(
                        f"{database:<10} {users:>3} users round {number} {side:<22} {load.completed_turns:>4} turns "
                        f"{load.turns_per_second:6.1f}/s, CPU {found.cpu_per_turn * 1000:.1f} ms/turn, server busy "
                        f"{m.server_cores:.0%}, client busy {m.client_cores:.0%}, waited for a core: server "
                        f"{m.server_wait / busy:.0%} client {m.client_wait / busy:.0%}"
                        + (f", errors {dict(load.errors)}" if load.errors else ""),
                        flush=True,
                    )
        for name, server in {"ours": by_side[NATIVE], "baseline": by_side[BASELINE]}.items():
            trouble, statuses = server.trouble()
            if trouble or statuses:
                report.notes.append(f"{database} {name} server logged: {trouble[:3]} {statuses}")


def _count(report: Report, database: str, side: str, errors: dict[str, int], samples: dict[str, str]) -> None:
    for kind, count in errors.items():
        report.errors[f"{database}, {side}: {kind} ({samples[kind][:200]})"] += count


async def run(arguments: argparse.Namespace, report: Report, logs: Path) -> str | None:
    source = snapshot(logs / "src")
    databases, version = await available(arguments.postgres, report.notes, quick=arguments.quick)
    levels = arguments.users or (QUICK_LEVELS if arguments.quick else LEVELS)
    budget = arguments.budget or (QUICK_BUDGET if arguments.quick else BUDGET)
    for database in databases:
        started = time.monotonic()
        await run_database(database, arguments, report, source, logs, budget / (len(databases) * len(levels)))
        print(f"{database}: {time.monotonic() - started:.0f} s", flush=True)
    return version


def main() -> int:
    options = parser("bench.cpu", __doc__, quick="SQLite, 20 users, 2 short rounds: a smoke run")
    options.add_argument("--users", type=int, nargs="+", help=f"concurrent users (default {LEVELS})")
    options.add_argument("--rounds", type=int, help=f"rounds per side and level (default {ROUNDS})")
    options.add_argument("--seconds", type=float, help=f"seconds of turns per round (default {SECONDS:g})")
    options.add_argument(
        "--app",
        choices=["shop", "plain"],
        default="shop",
        help="the demo shop (default), or a plain app as written with a new thread every 5 turns "
        "(`bench/harness/plain_app.py`; writes `server-cpu-plain` and `first-delta-plain`)",
    )
    options.add_argument(
        "--budget", type=float, help=f"seconds for all the rounds (default {BUDGET:g}; set-up on top)"
    )
    arguments = options.parse_args()
    pin_this_process()
    raise_open_files_limit()
    clock, report = Clock(), Report()
    with folder("cpu", keep=arguments.keep_logs) as logs:
        version = asyncio.run(run(arguments, report, logs))
    if not shutil.which("taskset"):
        report.notes.append("taskset not found: the servers were not pinned to a core")
    report.notes.append(
        "PostgreSQL's own backends are not counted in ours' CPU (nor the baseline's order lookups there)"
    )
    lines = environment(
        command_line("bench.cpu", sys.argv[1:]), postgres=version, notes=[*report.notes, clock.line()]
    )
    plain = arguments.app == "plain"
    texts = {
        "server-cpu-plain" if plain else "server-cpu": "\n".join(render_cpu(report, lines, plain=plain)),
        "first-delta-plain" if plain else "first-delta-baseline": "\n".join(render_first_delta(report)),
    }
    publish(arguments, texts, full=not (arguments.quick or arguments.rounds or arguments.users))
    return 0


if __name__ == "__main__":
    sys.exit(main())
