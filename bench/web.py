"""The server under concurrent users: HTTP and SSE against a bare Starlette SSE app.

    python -m bench.web [--quick] [--postgres URL] [--no-write] [--strict]

50, 200 and 500 simulated users (50 with `--quick`) in this process, each with its own thread
and open event stream, send the demo's 3-node turn "Where is ORD-5678?" turn after turn against
a real server process (`python -m cli serve --model demo`, SQLite, and PostgreSQL in a scratch
database when `--postgres` or $DURABLE_CHAT_TEST_POSTGRES_URL names a server), and against a bare
Starlette SSE app with no persistence (`bench.web_baseline`) under the same load. Measures turns
per second, time from POST to first `text_delta`, errors and the server's peak RSS. Prints the
results and writes the web section of `docs/benchmarks.md` (a full run only, unless `--write`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shlex
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from bench.sections import write_section
from bench.web_load import Load, LoadResult, run_load
from bench.web_process import Sampler, raise_open_files_limit, start_server
from bench.web_report import BASELINE, Phase, Report, render

POSTGRES_ENV = "DURABLE_CHAT_TEST_POSTGRES_URL"
_SNAPSHOT = ("agent", "bench", "cli", "store", "stream", "web")
ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "benchmarks.md"
SECRET = "bench-secret"
LEVELS = (50, 200, 500)
QUICK_LEVELS = (50,)
LEVEL_TURNS = {50: 3, 200: 3, 500: 1}
"""Turns per user at each level: 500 users take one turn each, so that a full run stays under ~8 minutes."""
BUDGET_SECONDS = 450.0
"""The turns of the last phases are cut (as errors) rather than let a full run go on past this."""
ALONE_TURNS = 5
"""Turns of a single user before the load, for the first-delta latency of an unloaded server."""
_PACKAGES = (
    "uvicorn",
    "starlette",
    "sse-starlette",
    "httpx",
    "pydantic-ai-slim",
    "sqlalchemy",
    "aiosqlite",
    "asyncpg",
)


def server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DURABLE_CHAT_")}
    env.update(
        DURABLE_CHAT_SECRET=SECRET,
        DURABLE_CHAT_RATE_LIMIT_BURST="1000",
        DURABLE_CHAT_RATE_LIMIT_PER_SECOND="1000",
        PYTHONUNBUFFERED="1",
    )
    return env


async def run_phase(
    system: str,
    users: int,
    turns: int,
    argv: list[str],
    env: dict[str, str],
    log_dir: Path,
    *,
    source: Path,
    deadline: float,
) -> Phase:
    """Start a server, warm it up with one turn, run `users` users of `turns` turns, stop it."""
    server = await start_server(f"{system}-{users}", argv, env, log_dir, cwd=source)
    try:
        warm = await run_load(server.base_url, Load(users=1, turns=1, secret=SECRET, deadline=60))
        alone = await run_load(server.base_url, Load(users=1, turns=ALONE_TURNS, secret=SECRET, deadline=60))
        _merge(warm, alone, "")
        await asyncio.sleep(0.5)
        idle_kb = server.status("VmRSS") or 0
        sampler = Sampler(server)
        sampler.start()
        marks: dict[str, float] = {}

        def started() -> None:
            marks["server"], marks["client"] = server.cpu_seconds(), time.process_time()

        result = await run_load(
            server.base_url,
            Load(users=users, turns=turns, secret=SECRET, deadline=deadline),
            on_start=started,
        )
        server_cpu = server.cpu_seconds() - marks.get("server", 0.0)
        client_cpu = time.process_time() - marks.get("client", 0.0)
        peak_kb = await sampler.stop()
    finally:
        exit_code = await server.stop()
    _merge(result, warm, "warm-up: ")
    trouble, statuses = server.trouble()
    phase = Phase(system, result, idle_kb, peak_kb, server_cpu, client_cpu, trouble, statuses, exit_code)
    phase.alone_first_delta = alone.first_delta
    _print_phase(phase)
    return phase


def _merge(result: LoadResult, other: LoadResult, prefix: str) -> None:
    for kind, count in other.errors.items():
        result.errors[prefix + kind] += count
        result.error_samples.setdefault(prefix + kind, other.error_samples[kind])


def _print_phase(phase: Phase) -> None:
    load = phase.load
    first = sorted(load.first_delta)
    p50 = first[len(first) // 2] * 1000 if first else float("nan")
    print(
        f"  {phase.system:<10} {phase.users:>4} users: {load.completed_turns}/{phase.users * load.turns_per_user} turns "
        f"in {load.elapsed:.1f}s = {load.turns_per_second:.1f}/s, first delta p50 {p50:.1f} ms, "
        f"{load.error_count} errors, streams {load.streams_open}, peak RSS {phase.peak_rss_kb / 1024:.0f} MB, "
        f"server CPU {phase.server_busy:.0%} client CPU {phase.client_busy:.0%}",
        flush=True,
    )
    for kind, count in load.errors.items():
        print(f"    error {kind} x{count}: {load.error_samples[kind][:300]}", flush=True)
    for line in list(dict.fromkeys(phase.trouble))[:10]:
        print(f"    server: {line[:300]}", flush=True)


@asynccontextmanager
async def sqlite_database(directory: Path, users: int) -> AsyncGenerator[str]:
    yield f"sqlite+aiosqlite:///{directory / f'b-{users}.db'}"


@asynccontextmanager
async def postgres_database(url: str) -> AsyncGenerator[str]:
    """A scratch database on the server at `url`, dropped afterwards: its URL."""
    admin = create_async_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    name = f"bench_web_{uuid.uuid4().hex[:12]}"
    try:
        async with admin.connect() as connection:
            await connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
        try:
            yield make_url(url).set(database=name).render_as_string(hide_password=False)
        finally:
            async with admin.connect() as connection:
                await connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await admin.dispose()


async def postgres_version(url: str) -> str:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            return str((await connection.execute(sa.text("SELECT version()"))).scalar_one()).split(" on ")[0]
    finally:
        await engine.dispose()


def ours_argv(database_url: str) -> list[str]:
    return [sys.executable, "-m", "cli", "serve", "--port", "{port}", "--db", database_url, "--model", "demo"]


def baseline_argv() -> list[str]:
    return [sys.executable, "-m", "bench.web_baseline", "--port", "{port}"]


def snapshot(target: Path) -> Path:
    """Copy the packages the servers import, so that every phase runs the code as it was at the start."""
    for package in _SNAPSHOT:
        shutil.copytree(ROOT / package, target / package, ignore=shutil.ignore_patterns("__pycache__"))
    return target


async def _phase(
    system: str,
    users: int,
    turns: int,
    arguments: argparse.Namespace,
    env: dict[str, str],
    directory: Path,
    source: Path,
    deadline: float,
) -> Phase:
    if system == BASELINE:
        return await run_phase(
            system, users, turns, baseline_argv(), env, directory, source=source, deadline=deadline
        )
    database = (
        sqlite_database(directory, users) if system == "SQLite" else postgres_database(arguments.postgres)
    )
    async with database as url:
        return await run_phase(
            system, users, turns, ours_argv(url), env, directory, source=source, deadline=deadline
        )


async def run(arguments: argparse.Namespace, report: Report) -> None:
    levels: tuple[int, ...] = (
        tuple(arguments.users) if arguments.users else QUICK_LEVELS if arguments.quick else LEVELS
    )
    directory = Path(tempfile.mkdtemp(prefix="bench-web-"))
    source = snapshot(directory / "src")
    env = server_env()
    systems: list[str] = [BASELINE, "SQLite"]
    if arguments.postgres:
        try:
            report.versions.append(f"PostgreSQL: {await postgres_version(arguments.postgres)}")
            systems.append("PostgreSQL")
        except (OSError, SQLAlchemyError) as error:
            where = make_url(arguments.postgres).render_as_string(hide_password=True)
            print(f"PostgreSQL skipped: {where!r}: {error!r}", flush=True)
            report.notes.append(f"PostgreSQL not measured: {error!r}")
    else:
        report.notes.append(f"PostgreSQL not measured: pass --postgres URL or set {POSTGRES_ENV}")
    plan = [
        (users, system)
        for index, users in enumerate(levels)
        # Alternate which side goes first, so a drift in the machine's load spreads over both.
        for system in (systems if index % 2 == 0 else systems[::-1])
    ]
    try:
        for number, (users, system) in enumerate(plan):
            turns = arguments.turns or LEVEL_TURNS.get(users, 3)
            if number == 0 or plan[number - 1][0] != users:
                print(f"{users} concurrent users, {turns} turns each:", flush=True)
            left = report.budget_end - time.monotonic() - 15 * (len(plan) - number - 1)
            deadline = max(20.0, min(users * turns * 0.3, left))
            try:
                report.phases.append(
                    await _phase(system, users, turns, arguments, env, directory, source, deadline)
                )
            except (RuntimeError, OSError, SQLAlchemyError) as error:
                print(f"  {system:<10} {users:>4} users: FAILED: {error}", flush=True)
                report.failures.append(f"{system}, {users} users: {str(error)[-600:]}")
    finally:
        if arguments.keep_logs:
            print(f"server logs kept in {directory}", flush=True)
        else:
            shutil.rmtree(directory, ignore_errors=True)


def _machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores; {platform.platform()}"


def _versions() -> list[str]:
    packages = []
    for name in _PACKAGES:
        try:
            packages.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return [f"Python {platform.python_version()}; SQLite {sqlite3.sqlite_version}", ", ".join(packages)]


def _turns_text(turns: int | None) -> str:
    if turns is not None:
        return str(turns)
    return ", ".join(f"{count} at {users} users" for users, count in LEVEL_TURNS.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--quick", action="store_true", help="50 users only (<60 s); writes nothing unless --write"
    )
    parser.add_argument(
        "--postgres",
        default=os.environ.get(POSTGRES_ENV),
        help=f"also run on PostgreSQL (postgresql+asyncpg://…) in a scratch database created and dropped "
        f"(default: ${POSTGRES_ENV})",
    )
    parser.add_argument("--no-postgres", dest="postgres", action="store_const", const=None)
    parser.add_argument(
        "--users", type=int, nargs="+", help="the levels of concurrent users (default: 50 200 500)"
    )
    parser.add_argument(
        "--turns", type=int, help="turns per user (default: 3 at 50 and 200 users, 1 at 500; at most 6)"
    )
    parser.add_argument(
        "--write", action="store_true", help="write the docs section even for --quick/--users"
    )
    parser.add_argument("--no-write", action="store_true", help="do not write the docs section")
    parser.add_argument("--keep-logs", action="store_true", help="keep the servers' logs and databases")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    arguments = parser.parse_args()

    limit = raise_open_files_limit()
    started = time.monotonic()
    report = Report(
        command=shlex.join(["python", "-m", "bench.web", *sys.argv[1:]]),
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        machine=_machine(),
        versions=_versions(),
        settings=f"turns per user {_turns_text(arguments.turns)}, sent when every user's stream is open, no think "
        f"time; per server, one warm-up turn, then {ALONE_TURNS} turns of one user alone; per-user rate limit "
        f"raised to 1000/s; open-files limit {limit}; a full run's turns stop after {BUDGET_SECONDS:.0f} s",
        load_start=os.getloadavg()[0],
    )
    report.budget_end = started + BUDGET_SECONDS
    asyncio.run(run(arguments, report))
    report.run_seconds = time.monotonic() - started
    report.load_end = os.getloadavg()[0]
    section = render(report)
    print()
    print(section)
    full = not arguments.quick and not arguments.users
    if (full or arguments.write) and not arguments.no_write:
        write_section(DOCS, "web", section)
        print(f"wrote the web section of {DOCS}", flush=True)
    return 1 if arguments.strict and not report.passed else 0


if __name__ == "__main__":
    sys.exit(main())
