"""Server CPU per turn of two versions of our code side by side: a git ref against the working tree.

Both pinned, in alternating rounds as `bench.cpu` runs its sides, then one user's first delta on each;
each server's resident memory after the rounds. Prints; writes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from contextlib import AsyncExitStack
from pathlib import Path

from bench.harness.clients import Load, measure
from bench.harness.databases import scratch_database
from bench.harness.options import parser
from bench.harness.reports import ROOT
from bench.harness.servers import (
    PLAIN_APP,
    UNLIMITED,
    ServerProcess,
    folder,
    ours_argv,
    pin_this_process,
    pinned,
    server_env,
    serving,
    snapshot,
)
from bench.harness.stats import median, rotated


def export(ref: str, target: Path) -> Path:
    """The source tree as it is at `ref`."""
    target.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


async def run(arguments: argparse.Namespace, logs: Path) -> None:
    sources = {
        arguments.base: export(arguments.base, logs / "base-src"),
        "working tree": snapshot(logs / "new-src"),
    }
    cpu: dict[str, list[float]] = {name: [] for name in sources}
    first: dict[str, list[float]] = {name: [] for name in sources}
    database = "PostgreSQL" if arguments.postgres else "SQLite"
    async with AsyncExitStack() as stack:
        servers: dict[str, ServerProcess] = {}
        for number, (name, source) in enumerate(sources.items()):
            url = await stack.enter_async_context(
                scratch_database(database, logs, f"ab-{number}", arguments.postgres)
            )
            argv = pinned(ours_argv(url, app=PLAIN_APP if arguments.app == "plain" else None))
            servers[name] = await stack.enter_async_context(
                serving(f"ab-{number}", argv, server_env(UNLIMITED), logs, cwd=source)
            )
        for server in servers.values():  # warm-up
            await measure([server], Load(users=2, turns=3, protocol=arguments.protocol))
        names = list(servers)
        timed = Load(
            users=arguments.users,
            turns=None,
            seconds=arguments.seconds,
            protocol=arguments.protocol,
            deadline=600,
            turns_per_thread=5 if arguments.app == "plain" else None,
        )
        for number in range(arguments.rounds):
            for name in rotated(names, number):
                measured = await measure([servers[name]], timed, settle=1.2)
                load = measured.result
                if load.errors:
                    print(f"{name}: errors {dict(load.errors)} {load.error_samples}", flush=True)
                cpu[name].append(measured.server_cpu / max(load.completed_turns, 1))
                print(
                    f"round {number} {name:<14} {load.completed_turns:4d} turns {cpu[name][-1] * 1000:6.2f} ms/turn"
                )
        memory = {
            name: (server.status("VmRSS") or 0, server.status("VmHWM") or 0)
            for name, server in servers.items()
        }
        for number in range(arguments.alone):
            for name in rotated(names, number):
                alone = await measure([servers[name]], Load(users=1, turns=1, protocol=arguments.protocol))
                first[name].extend(alone.result.first_delta)
    print(
        f"\n{database}, {arguments.protocol}, {arguments.users} users, {arguments.rounds} rounds each (medians):"
    )
    for name in names:
        print(
            f"  {name:<14} {median(cpu[name]) * 1000:6.2f} ms/turn, first delta p50 {median(first[name]) * 1000:5.1f} ms,"
            f" RSS after the rounds {memory[name][0] / 1024:.0f} MB (peak {memory[name][1] / 1024:.0f} MB)"
        )
    base, new = (median(cpu[name]) for name in names)
    print(f"  working tree / {arguments.base}: {new / base:.3f} ({(new - base) * 1000:+.2f} ms/turn)")


def main() -> int:
    options = parser("bench.cpu_ab", __doc__, quick=None, postgres="explicit", sections=False)
    options.add_argument("--base", default="HEAD", help="the git ref to compare the working tree with")
    options.add_argument("--protocol", choices=["ai-sdk", "native"], default="ai-sdk")
    options.add_argument(
        "--app",
        choices=["shop", "plain"],
        default="shop",
        help="the demo shop, or the plain app with a new thread every 5 turns (as `bench.cpu --app plain`)",
    )
    options.add_argument("--users", type=int, default=20)
    options.add_argument("--rounds", type=int, default=8)
    options.add_argument("--seconds", type=float, default=2.0)
    options.add_argument(
        "--alone", type=int, default=20, help="turns of one user alone on each (first delta)"
    )
    arguments = options.parse_args()
    pin_this_process()
    with folder("cpu-ab", keep=arguments.keep_logs) as logs:
        asyncio.run(run(arguments, logs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
