"""Server CPU per turn, and the first delta, of ours against pydantic-ai's own adapter on the same agent.

    python -m bench.cpu [--quick] [--postgres URL | --no-postgres] [--rounds N] [--seconds S] [--no-write]

Two server processes per database, both pinned to core 1 (`taskset`), the clients in this process
on core 0: the baseline (`bench.cpu_baseline`: `VercelAIAdapter` serving the demo shop's agent,
nothing stored) and ours (`durable-chat serve`, SQLite, and PostgreSQL in a scratch database when
`--postgres` or $DURABLE_CHAT_TEST_POSTGRES_URL names a server), each on a database of its own
with the shop's data. First one user alone takes turns on each side in turn (the first delta),
then, at 20 and 200 concurrent users, the three sides (baseline, ours over the native API, ours
over the AI SDK endpoint) take rounds in a rotating order, each round's server CPU read from
/proc. Writes the `server-cpu` and `first-delta-baseline` sections of `docs/benchmarks.md` (a
full run only, unless `--write`). ~7 minutes; `--quick` (SQLite, 20 users) under a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from agent.demo import shop_app
from bench.cpu_clients import Protocol, RoundResult, run_round
from bench.cpu_report import AI_SDK, BASELINE, NATIVE, SIDES, Report, Round, render_cpu, render_first_delta
from bench.report import environment
from bench.sections import write_section
from bench.web import (
    DOCS,
    POSTGRES_ENV,
    SECRET,
    ours_argv,
    postgres_database,
    postgres_version,
    server_env,
    snapshot,
)
from bench.web_process import ServerProcess, raise_open_files_limit, start_server
from store import Database

SERVER_CORE, CLIENT_CORE = 1, 0
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


async def prepare(url: str) -> None:
    """Our schema and the shop's tables and data, as `durable-chat serve` makes them at start."""
    db = await Database.connect(url)
    try:
        await shop_app(delay=0).start(db.engine)
    finally:
        await db.aclose()


@asynccontextmanager
async def scratch(database: str, postgres: str | None, folder: Path, name: str) -> AsyncGenerator[str]:
    if database == "PostgreSQL" and postgres:
        async with postgres_database(postgres) as url:
            yield url
    else:
        yield f"sqlite+aiosqlite:///{folder / f'{name}.db'}"


def pinned(argv: list[str], core: int = SERVER_CORE) -> list[str]:
    return ["taskset", "-c", str(core), *argv] if shutil.which("taskset") else argv


async def servers(
    stack: AsyncExitStack, database: str, postgres: str | None, source: Path, logs: Path
) -> dict[str, ServerProcess]:
    ours_url = await stack.enter_async_context(scratch(database, postgres, logs, f"ours-{database}"))
    base_url = await stack.enter_async_context(scratch(database, postgres, logs, f"baseline-{database}"))
    await prepare(base_url)
    env = server_env()
    env["DURABLE_CHAT_MESSAGES_PER_MINUTE"] = "1000000"  # a user sends turn after turn
    ours = await start_server(f"ours-{database}", pinned(ours_argv(ours_url)), env, logs, cwd=source)
    stack.push_async_callback(ours.stop)
    argv = [sys.executable, "-m", "bench.cpu_baseline", "--port", "{port}", "--db", base_url]
    baseline = await start_server(f"baseline-{database}", pinned(argv), env, logs, cwd=source)
    stack.push_async_callback(baseline.stop)
    return {BASELINE: baseline, NATIVE: ours, AI_SDK: ours}


def run_queue_wait(pid: int | str) -> float:
    """Seconds the process's main thread has spent runnable but waiting for a core (`/proc/…/schedstat`).

    A round's share of it says how much other work on the machine kept that side off its core.
    """
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


async def measure(
    server: ServerProcess,
    side: str,
    users: int,
    *,
    seconds: float | None,
    turns: int | None = None,
    settle: float = SETTLE,
) -> tuple[RoundResult, float, float, tuple[float, float]]:
    """One round: its result, the server's CPU seconds and this process's from start to `settle` after,
    and how long each waited for its core during the turns."""
    marks: dict[str, float] = {}

    def start() -> None:
        marks["server"], marks["client"] = server.cpu_seconds(), time.process_time()
        marks["server wait"], marks["client wait"] = run_queue_wait(server.pid), run_queue_wait("self")

    result = await run_round(
        server.base_url,
        PROTOCOLS[side],
        users=users,
        seconds=seconds or 0.0,
        turns=turns,
        secret=SECRET,
        on_start=start,
    )
    waits = (
        run_queue_wait(server.pid) - marks["server wait"],
        run_queue_wait("self") - marks["client wait"],
    )
    await asyncio.sleep(settle)
    return result, server.cpu_seconds() - marks["server"], time.process_time() - marks["client"], waits


async def run_database(
    database: str, arguments: argparse.Namespace, report: Report, source: Path, share: float
) -> None:
    logs = Path(tempfile.mkdtemp(prefix=f"bench-cpu-{database.lower()}-"))
    quick = arguments.quick
    async with AsyncExitStack() as stack:
        by_side = await servers(stack, database, arguments.postgres, source, logs)
        for side in SIDES:  # warm-up: imports, first connections, caches
            await measure(by_side[side], side, 2, seconds=None, turns=3, settle=0)
        for turn in range(QUICK_ALONE_TURNS if quick else ALONE_TURNS):
            order = SIDES[turn % 3 :] + SIDES[: turn % 3]
            for side in order:
                result = (await measure(by_side[side], side, 1, seconds=None, turns=1, settle=0))[0]
                report.alone.setdefault((database, side), []).extend(result.first_delta)
                _count(report, database, side, result)
        levels = arguments.users or (QUICK_LEVELS if quick else LEVELS)
        rounds = arguments.rounds or (QUICK_ROUNDS if quick else ROUNDS)
        for users in levels:
            started = time.monotonic()
            for number in range(rounds):
                if number and (time.monotonic() - started) * (number + 1) / number > share:
                    report.notes.append(
                        f"{database}, {users} users: {number} of {rounds} rounds, the time budget's share "
                        f"({share:.0f} s) spent"
                    )
                    break
                for side in SIDES[number % 3 :] + SIDES[: number % 3]:
                    seconds = arguments.seconds or (QUICK_SECONDS if quick else SECONDS)
                    result, server_cpu, client_cpu, waits = await measure(
                        by_side[side], side, users, seconds=seconds
                    )
                    _count(report, database, side, result)
                    found = Round(
                        database,
                        users,
                        side,
                        number,
                        server_cpu,
                        client_cpu,
                        result.elapsed,
                        result.turns,
                        tuple(result.first_delta),
                        sum(result.errors.values()),
                        *waits,
                    )
                    report.rounds.append(found)
                    per_turn = found.cpu_per_turn
                    print(
                        f"{database:<10} {users:>3} users round {number} {side:<22} {result.turns:>4} turns "
                        f"{result.turns / max(result.elapsed, 1e-9):6.1f}/s, CPU "
                        f"{'—' if per_turn is None else f'{per_turn * 1000:.1f}'} ms/turn, server busy "
                        f"{server_cpu / max(result.elapsed, 1e-9):.0%}, client busy "
                        f"{client_cpu / max(result.elapsed, 1e-9):.0%}, waited for a core: server "
                        f"{waits[0] / max(result.elapsed, 1e-9):.0%} client {waits[1] / max(result.elapsed, 1e-9):.0%}"
                        + (f", errors {dict(result.errors)}" if result.errors else ""),
                        flush=True,
                    )
        for name, server in {"ours": by_side[NATIVE], "baseline": by_side[BASELINE]}.items():
            trouble, statuses = server.trouble()
            if trouble or statuses:
                report.notes.append(f"{database} {name} server logged: {trouble[:3]} {statuses}")


def _count(report: Report, database: str, side: str, result: RoundResult) -> None:
    for kind, count in result.errors.items():
        report.errors[f"{database}, {side}: {kind} ({result.samples[kind][:200]})"] += count


async def run(arguments: argparse.Namespace, report: Report) -> None:
    source = snapshot(Path(tempfile.mkdtemp(prefix="bench-cpu-src-")))
    databases = ["SQLite"]
    postgres: str | None = None
    if arguments.postgres and not arguments.quick:
        try:
            postgres = await postgres_version(arguments.postgres)
            databases.append("PostgreSQL")
        except (OSError, SQLAlchemyError) as error:
            where = make_url(arguments.postgres).render_as_string(hide_password=True)
            print(f"PostgreSQL skipped: {where!r}: {error!r}", flush=True)
            report.notes.append(f"PostgreSQL not measured: {error!r}")
    elif not arguments.quick:
        report.notes.append(f"PostgreSQL not measured: pass --postgres URL or set {POSTGRES_ENV}")
    report.environment = environment(report.command, postgres, [])
    levels = arguments.users or (QUICK_LEVELS if arguments.quick else LEVELS)
    budget = arguments.budget or (QUICK_BUDGET if arguments.quick else BUDGET)
    for database in databases:
        started = time.monotonic()
        await run_database(database, arguments, report, source, budget / (len(databases) * len(levels)))
        print(f"{database}: {time.monotonic() - started:.0f} s", flush=True)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="SQLite, 20 users, 2 short rounds: a smoke run")
    parser.add_argument("--postgres", metavar="URL", default=os.environ.get(POSTGRES_ENV))
    parser.add_argument("--no-postgres", dest="postgres", action="store_const", const=None)
    parser.add_argument("--users", type=int, nargs="+", help=f"concurrent users (default {LEVELS})")
    parser.add_argument("--rounds", type=int, help=f"rounds per side and level (default {ROUNDS})")
    parser.add_argument("--seconds", type=float, help=f"seconds of turns per round (default {SECONDS:g})")
    parser.add_argument(
        "--budget",
        type=float,
        help=f"seconds for all the rounds (default {BUDGET:g}; the set-up comes on top)",
    )
    parser.add_argument("--write", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--output", type=Path, default=DOCS)
    return parser.parse_args(argv)


def main() -> int:
    arguments = parse()
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 1:
        os.sched_setaffinity(0, {CLIENT_CORE})
    raise_open_files_limit()
    command = shlex.join(["python", "-m", "bench.cpu", *(a for a in sys.argv[1:] if "://" not in a)])
    report = Report(command=command)
    started = time.monotonic()
    asyncio.run(run(arguments, report))
    report.seconds = time.monotonic() - started
    if not shutil.which("taskset"):
        report.notes.append("taskset not found: the servers were not pinned to a core")
    report.notes.append(
        "PostgreSQL's own backends are not counted in ours' CPU (nor the baseline's order lookups there)"
    )
    cpu, first = "\n".join(render_cpu(report)), "\n".join(render_first_delta(report))
    print(f"\n{cpu}\n\n{first}\n", flush=True)
    write = arguments.write if arguments.write is not None else not (arguments.quick or arguments.rounds)
    if write:
        write_section(arguments.output, "server-cpu", cpu)
        write_section(arguments.output, "first-delta-baseline", first)
        print(f"wrote the server-cpu and first-delta-baseline sections of {arguments.output}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
