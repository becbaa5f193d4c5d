"""Several server processes on one PostgreSQL database: turns/s and first-delta latency with 1, 2 and 4 workers.

    python -m bench.workers [--quick] [--postgres URL] [--workers 1 2 4] [--users 50 200] [--no-write]

For each number of workers and each level of concurrent users (50 and 200; 20 with `--quick`),
a fresh PostgreSQL database is created, that many real servers (`python -m cli serve --model
demo`, their connection pools capped by `bench.worker_serve` so that together they stay within
`CONNECTIONS`) are started on it, and the users of `bench.web_load` are spread over them round robin:
each user creates its thread, follows its stream and posts its turns on one worker, so a worker
drives the runs posted to it. The bare Starlette SSE app (`bench.web_baseline`, one process, no
database) gets the same load at each level, as the floor. Writes the "Workers (PostgreSQL)"
section of `docs/benchmarks.md` (a full run only, unless `--write`).
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
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from bench.floors import asyncpg_dsn
from bench.sections import write_section
from bench.web import (
    DOCS,
    POSTGRES_ENV,
    SECRET,
    _machine,  # pyright: ignore[reportPrivateUsage]  (shared with bench.web, not copied)
    _versions,  # pyright: ignore[reportPrivateUsage]
    baseline_argv,
    ours_argv,
    postgres_database,
    postgres_version,
    server_env,
    snapshot,
)
from bench.web_load import Load, run_load
from bench.web_process import ServerProcess, raise_open_files_limit, start_server
from bench.workers_report import BASELINE, Measured, Report, render

WORKERS = (1, 2, 4)
LEVELS = (50, 200)
LEVEL_TURNS = {50: 2, 200: 1}
QUICK_LEVELS = (20,)
QUICK_WORKERS = (1, 2)
BUDGET_SECONDS = 360.0
"""The turns of the last phases are cut (as errors) rather than let a full run go on past this."""
CONNECTIONS = 60
"""PostgreSQL connections all the workers of one measurement may open together (see `bench.worker_serve`):
what one worker opens at most by default, and 60% of a default server's 100, leaving room for its other clients."""


def worker_argv(database_url: str, workers: int) -> list[str]:
    """A worker whose pools are capped at its share of `CONNECTIONS`; `python -m cli serve` is after `serve`."""
    serve = ours_argv(database_url)
    return [serve[0], "-m", "bench.worker_serve", "--connections", str(CONNECTIONS // workers), *serve[3:]]


def machine_busy_ticks() -> tuple[int, int]:
    """All cores' busy and total clock ticks so far (`/proc/stat`), whoever used them."""
    fields = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    return sum(fields) - idle, sum(fields)


async def _start_workers(
    count: int, database_url: str, env: dict[str, str], logs: Path, source: Path, tag: str
) -> list[ServerProcess]:
    """`count` servers on one database; the first alone, so that only one process creates the schema."""
    argv = worker_argv(database_url, count)
    servers = [await start_server(f"{tag}-0", argv, env, logs, cwd=source)]
    started = await asyncio.gather(
        *(start_server(f"{tag}-{n}", argv, env, logs, cwd=source) for n in range(1, count)),
        return_exceptions=True,
    )
    servers += [server for server in started if isinstance(server, ServerProcess)]
    failed = [error for error in started if isinstance(error, BaseException)]
    if failed:
        await asyncio.gather(*(server.stop() for server in servers))
        raise RuntimeError(f"{len(failed)} of {count} workers did not start: {failed[0]}")
    return servers


async def _connections(database: str, admin: asyncpg.Connection, peak: list[int]) -> None:
    """Sample how many connections the database has (pools of every worker), keeping the peak."""
    while True:
        count = await admin.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = $1", database)
        peak[0] = max(peak[0], int(count or 0))
        await asyncio.sleep(0.25)


async def measure(
    servers: Sequence[ServerProcess],
    system: str,
    users: int,
    turns: int,
    deadline: float,
    admin_url: str | None,
    database: str | None,
) -> Measured:
    """Warm every server up with one turn, then run the load over all of them."""
    warm = [
        await run_load(server.base_url, Load(users=1, turns=1, secret=SECRET, deadline=60))
        for server in servers
    ]
    peak = [0]
    sampler: asyncio.Task[None] | None = None
    admin = await asyncpg.connect(asyncpg_dsn(admin_url)) if admin_url and database else None
    if admin is not None and database is not None:
        sampler = asyncio.create_task(_connections(database, admin, peak))
    marks: dict[str, float] = {}
    ticks: dict[str, tuple[int, int]] = {}

    def started() -> None:
        marks["server"] = sum(server.cpu_seconds() for server in servers)
        marks["client"] = time.process_time()
        ticks["start"] = machine_busy_ticks()

    try:
        result = await run_load(
            [server.base_url for server in servers],
            Load(users=users, turns=turns, secret=SECRET, deadline=deadline),
            on_start=started,
        )
        server_cpu = sum(server.cpu_seconds() for server in servers) - marks.get("server", 0.0)
        client_cpu = time.process_time() - marks.get("client", 0.0)
        busy, total = machine_busy_ticks()
        start_busy, start_total = ticks.get("start", (busy, total))
    finally:
        if sampler is not None:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
        if admin is not None:
            await admin.close()
    for one in warm:
        for kind, count in one.errors.items():
            result.errors[f"warm-up: {kind}"] += count
            result.error_samples.setdefault(f"warm-up: {kind}", one.error_samples[kind])
    machine = (busy - start_busy) / (total - start_total) if total > start_total else 0.0
    return Measured(system, len(servers), result, server_cpu, client_cpu, machine, peak[0])


async def run_one(
    system: str,
    workers: int,
    users: int,
    turns: int,
    arguments: argparse.Namespace,
    env: dict[str, str],
    logs: Path,
    source: Path,
    deadline: float,
) -> Measured:
    tag = f"{system}-{workers}w-{users}u"
    if system == BASELINE:
        servers = [await start_server(tag, baseline_argv(), env, logs, cwd=source)]
        try:
            measured = await measure(servers, system, users, turns, deadline, None, None)
        finally:
            codes = [await server.stop() for server in servers]
    else:
        async with postgres_database(arguments.postgres) as url:
            database = make_url(url).database
            servers = await _start_workers(workers, url, env, logs, source, tag)
            try:
                measured = await measure(
                    servers, system, users, turns, deadline, arguments.postgres, database
                )
            finally:
                codes = list(await asyncio.gather(*(server.stop() for server in servers)))
    for server in servers:
        trouble, statuses = server.trouble()
        measured.trouble += trouble
        for status, count in statuses.items():
            measured.statuses[status] = measured.statuses.get(status, 0) + count
    measured.exit_codes = codes
    print(f"  {measured.line()}", flush=True)
    return measured


async def run(arguments: argparse.Namespace, report: Report) -> None:
    levels: tuple[int, ...] = tuple(arguments.users or (QUICK_LEVELS if arguments.quick else LEVELS))
    counts: tuple[int, ...] = tuple(arguments.workers or (QUICK_WORKERS if arguments.quick else WORKERS))
    directory = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    source = snapshot(directory / "src")
    env = server_env()
    plan = [
        (users, system, workers)
        for users in levels
        for system, workers in ([(BASELINE, 1)] if arguments.baseline else [])
        + [("PostgreSQL", w) for w in counts]
    ]
    try:
        for number, (users, system, workers) in enumerate(plan):
            turns = arguments.turns or LEVEL_TURNS.get(users, 2)
            if number == 0 or plan[number - 1][0] != users:
                print(f"{users} concurrent users, {turns} turns each:", flush=True)
            left = report.budget_end - time.monotonic() - 15 * (len(plan) - number - 1)
            deadline = max(20.0, min(users * turns * 0.5, left))
            try:
                report.measured.append(
                    await run_one(system, workers, users, turns, arguments, env, directory, source, deadline)
                )
            except (RuntimeError, OSError, SQLAlchemyError, asyncpg.PostgresError) as error:
                print(f"  {system} x{workers}, {users} users: FAILED: {error}", flush=True)
                report.failures.append(f"{system} x{workers}, {users} users: {str(error)[-600:]}")
    finally:
        if arguments.keep_logs:
            print(f"server logs kept in {directory}", flush=True)
        else:
            shutil.rmtree(directory, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--quick", action="store_true", help="1 and 2 workers, 20 users; writes nothing unless --write"
    )
    parser.add_argument(
        "--postgres",
        default=os.environ.get(POSTGRES_ENV),
        help=f"the PostgreSQL server to create the scratch databases on (default: ${POSTGRES_ENV})",
    )
    parser.add_argument("--workers", type=int, nargs="+", help="numbers of worker processes (default: 1 2 4)")
    parser.add_argument("--users", type=int, nargs="+", help="levels of concurrent users (default: 50 200)")
    parser.add_argument("--turns", type=int, help="turns per user (default: 3 at 50 users, 2 at 200)")
    parser.add_argument("--no-baseline", dest="baseline", action="store_false", help="skip the bare SSE app")
    parser.add_argument(
        "--write", action="store_true", help="write the docs section even for --quick/--users/--workers"
    )
    parser.add_argument("--no-write", action="store_true", help="do not write the docs section")
    parser.add_argument("--keep-logs", action="store_true", help="keep the servers' logs")
    arguments = parser.parse_args()
    if not arguments.postgres:
        parser.error(f"needs a PostgreSQL server: pass --postgres URL or set {POSTGRES_ENV}")

    limit = raise_open_files_limit()
    started = time.monotonic()
    report = Report(
        command=shlex.join(["python", "-m", "bench.workers", *sys.argv[1:]]),
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        machine=_machine(),
        versions=_versions(),
        settings="",
        load_start=os.getloadavg()[0],
    )
    try:
        report.versions.append(f"PostgreSQL: {asyncio.run(postgres_version(arguments.postgres))}")
    except (OSError, SQLAlchemyError) as error:
        where = make_url(arguments.postgres).render_as_string(hide_password=True)
        print(f"PostgreSQL at {where!r} is unreachable: {error!r}", file=sys.stderr)
        return 1
    turns = arguments.turns or ", ".join(f"{t} at {u} users" for u, t in LEVEL_TURNS.items())
    report.settings = (
        f"turns per user {turns}, sent when every user's stream is open, no think time; users spread over the "
        f"workers round robin, each posting and following on its own worker; one warm-up turn per worker; per-user "
        f"rate limit raised to 1000/s; open-files limit {limit}; a full run's turns stop after {BUDGET_SECONDS:.0f} s; "
        f"PostgreSQL connections capped at {CONNECTIONS} for all the workers together, split evenly (one worker: "
        "its default pools; see `bench/worker_serve.py`)"
    )
    report.budget_end = started + BUDGET_SECONDS
    asyncio.run(run(arguments, report))
    report.run_seconds = time.monotonic() - started
    report.load_end = os.getloadavg()[0]
    section = render(report)
    print()
    print(section)
    full = not (arguments.quick or arguments.users or arguments.workers)
    if (full or arguments.write) and not arguments.no_write:
        write_section(DOCS, "workers", section)
        print(f"wrote the workers section of {DOCS}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
