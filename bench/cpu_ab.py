"""Server CPU per turn of two versions of our code, interleaved: a git ref against the working tree.

    python -m bench.cpu_ab [--base HEAD] [--protocol ai-sdk|native] [--users 20] [--rounds 8]
                           [--seconds 2] [--alone 20] [--postgres URL]

Both servers (`durable-chat serve` on SQLite, or with `--postgres` each in its own scratch
database on that server) are pinned to core 1 and take
rounds in alternating order, as `bench.cpu` runs its sides; each round's CPU is read from /proc.
Then one user alone takes `--alone` turns on each in turn (the first delta). Prints the medians and
the ratio. For A/B work on a shared machine: the alternation spreads other load over both sides,
but a figure is only as quiet as the machine was.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path

from bench.cpu import measure, pinned, prepare
from bench.cpu_report import AI_SDK, NATIVE
from bench.web import ROOT, ours_argv, postgres_database, server_env, snapshot
from bench.web_process import ServerProcess, start_server


def export(ref: str, target: Path) -> Path:
    """The packages the servers import, as they are at `ref`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


async def run(arguments: argparse.Namespace) -> None:
    logs = Path(tempfile.mkdtemp(prefix="bench-cpu-ab-"))
    (logs / "base-src").mkdir()
    sources = {
        arguments.base: export(arguments.base, logs / "base-src"),
        "working tree": snapshot(logs / "new-src"),
    }
    side = AI_SDK if arguments.protocol == "ai-sdk" else NATIVE
    env = server_env()
    env["DURABLE_CHAT_MESSAGES_PER_MINUTE"] = "1000000"
    cpu: dict[str, list[float]] = {name: [] for name in sources}
    first: dict[str, list[float]] = {name: [] for name in sources}
    async with AsyncExitStack() as stack:
        servers: dict[str, ServerProcess] = {}
        for number, (name, source) in enumerate(sources.items()):
            if arguments.postgres:
                url = await stack.enter_async_context(postgres_database(arguments.postgres))
            else:
                url = f"sqlite+aiosqlite:///{logs / f'ab-{number}.db'}"
            await prepare(url)
            servers[name] = await start_server(f"ab-{number}", pinned(ours_argv(url)), env, logs, cwd=source)
            stack.push_async_callback(servers[name].stop)
        for server in servers.values():  # warm-up
            await measure(server, side, 2, seconds=None, turns=3, settle=0)
        names = list(servers)
        for number in range(arguments.rounds):
            for name in names if number % 2 == 0 else names[::-1]:
                result, server_cpu, _, _ = await measure(
                    servers[name], side, arguments.users, seconds=arguments.seconds
                )
                if result.errors:
                    print(f"{name}: errors {dict(result.errors)} {result.samples}", flush=True)
                cpu[name].append(server_cpu / max(result.turns, 1))
                print(
                    f"round {number} {name:<14} {result.turns:4d} turns {cpu[name][-1] * 1000:6.2f} ms/turn",
                    flush=True,
                )
        for number in range(arguments.alone):
            for name in names if number % 2 == 0 else names[::-1]:
                result = (await measure(servers[name], side, 1, seconds=None, turns=1, settle=0))[0]
                first[name].extend(result.first_delta)
    base, new = (statistics.median(cpu[name]) for name in names)
    database = "PostgreSQL" if arguments.postgres else "SQLite"
    print(
        f"\n{database}, {arguments.protocol}, {arguments.users} users, {arguments.rounds} rounds each (medians):"
    )
    for name in names:
        print(f"  {name:<14} {statistics.median(cpu[name]) * 1000:6.2f} ms/turn", end="")
        if first[name]:
            print(f", first delta p50 {statistics.median(first[name]) * 1000:5.1f} ms", end="")
        print()
    print(f"  working tree / {arguments.base}: {new / base:.3f} ({(new - base) * 1000:+.2f} ms/turn)")


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cpu_ab", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--base", default="HEAD", help="the git ref to compare the working tree with")
    parser.add_argument("--protocol", choices=["ai-sdk", "native"], default="ai-sdk")
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--postgres", metavar="URL", help="on a scratch database of this PostgreSQL server")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--alone", type=int, default=20, help="turns of one user alone on each (first delta)")
    arguments = parser.parse_args()
    asyncio.run(run(arguments))
    return 0


if __name__ == "__main__":
    sys.exit(main())
