"""PostgreSQL sessions a server opens under load, by pool size: what `DURABLE_CHAT_POOL_SIZE` is for.

    python -m bench.pool [--postgres URL] [--users 200] [--turns 5] [--pools 10+20 20+10 30+0] [--no-write]

A pool keeps `size` connections and opens up to `overflow` more under load, closing each of those
when it is returned: a pool smaller than what the load uses at once keeps opening and closing
connections, each a new PostgreSQL session (a server process forked, authenticated, its caches
cold). For each pool setting, a real `durable-chat serve` on a scratch database of its own, and
`--users` users taking `--turns` demo turns each over the native API; the database's `sessions`
counter (`pg_stat_database`, PostgreSQL 14 and later) is read before and after the turns, after a
warm-up that opened what the pools keep. Writes the `pool-sessions` section of
`docs/benchmarks.md` (a full run, unless `--no-write`). ~1 minute.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from bench.cpu import prepare
from bench.cpu_clients import run_round
from bench.report import environment
from bench.sections import write_section
from bench.web import DOCS, POSTGRES_ENV, SECRET, ours_argv, postgres_database, postgres_version, server_env
from bench.web_process import raise_open_files_limit, start_server

SECTION = "pool-sessions"
POOLS = ("10+20", "20+10", "30+0")
"""`size+overflow`: the defaults before this benchmark, the next ones (fine at 20 users, not at 200),
and today's: the same 30 at most, all kept."""


@dataclass(frozen=True)
class Measured:
    pool: str
    turns: int
    seconds: float
    sessions: int
    """New sessions on the database during the turns."""
    errors: int
    cpu_ms: float = 0.0
    """The server's CPU (user and system, every thread) per turn."""


async def _sessions(url: str) -> int:
    """The database's `sessions` counter: sessions established since the statistics were reset."""
    name = make_url(url).database
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            # The statistics a backend reads are a snapshot per transaction: a new one each time.
            await connection.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
            query = sa.text("SELECT sessions FROM pg_stat_database WHERE datname = :name")
            return int((await connection.execute(query, {"name": name})).scalar_one())
    finally:
        await engine.dispose()


async def measure(server_url: str, pool: str, users: int, turns: int, logs: Path) -> Measured:
    size, overflow = pool.split("+")
    async with postgres_database(server_url) as url:
        await prepare(url)
        env = server_env() | {
            "DURABLE_CHAT_MESSAGES_PER_MINUTE": "1000000",
            "DURABLE_CHAT_POOL_SIZE": size,
            "DURABLE_CHAT_POOL_MAX_OVERFLOW": overflow,
        }
        server = await start_server(f"pool-{size}-{overflow}", ours_argv(url), env, logs)
        try:
            # The warm-up opens what the pools keep; the counter then counts what the load adds.
            await run_round(server.base_url, "native", users=users, seconds=0.0, turns=2, secret=SECRET)
            await asyncio.sleep(0.5)  # the statistics are sent by each backend within 500 ms
            before = await _sessions(url)
            cpu_before = server.cpu_seconds()
            started = time.monotonic()
            result = await run_round(
                server.base_url, "native", users=users, seconds=0.0, turns=turns, secret=SECRET
            )
            elapsed = time.monotonic() - started
            cpu = server.cpu_seconds() - cpu_before
            await asyncio.sleep(1.0)
            # Our own read of the counter is a session too: one, counted in `before`'s reading.
            after = await _sessions(url) - 1
        finally:
            await server.stop()
    cpu_ms = 1000 * cpu / max(result.turns, 1)
    return Measured(pool, result.turns, elapsed, after - before, sum(result.errors.values()), cpu_ms)


def render(results: list[Measured], arguments: argparse.Namespace, version: str, seconds: float) -> str:
    lines = [
        "## PostgreSQL sessions opened under load, by pool size",
        "",
        "Each pool setting (`DURABLE_CHAT_POOL_SIZE`+`DURABLE_CHAT_POOL_MAX_OVERFLOW`) on a real "
        "`durable-chat serve` with a scratch database of its own; "
        f"{arguments.users} users take {arguments.turns} demo turns each over the native API (POST and the "
        "thread's stream), after a warm-up of 2 turns each. New sessions: the database's `sessions` counter "
        "(`pg_stat_database`) after the turns less before them, our own reading of it left out. A connection "
        "opened beyond the pool size is closed when it is returned, so a pool smaller than what the load uses "
        "at once opens a new session again and again, which costs the server CPU: its CPU per turn is "
        "its user and system time (`/proc/PID/stat`, every thread) over the turns, divided by them "
        "(the server is not pinned: a figure to compare between the rows of one run).",
        "",
        "### Environment",
        "",
        *environment(
            f"python -m bench.pool {shlex.join(sys.argv[1:])}".strip(),
            version.removeprefix("PostgreSQL "),
            [f"Run time: {seconds:.0f}s; load average (1 min) {os.getloadavg()[0]:.1f} at the end"],
        ),
        "",
        "### Results",
        "",
        "| pool (size + overflow) | turns | seconds | new sessions | new sessions per 100 turns | server CPU ms/turn | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for found in results:
        per_100 = 100 * found.sessions / max(found.turns, 1)
        lines.append(
            f"| {found.pool} | {found.turns} | {found.seconds:.1f} | {found.sessions} | {per_100:.1f} "
            f"| {found.cpu_ms:.1f} | {found.errors} |"
        )
    return "\n".join(lines)


async def main_async(arguments: argparse.Namespace) -> int:
    if not arguments.postgres:
        print(f"bench.pool needs PostgreSQL: pass --postgres URL or set {POSTGRES_ENV}", file=sys.stderr)
        return 2
    raise_open_files_limit()
    logs = Path(tempfile.mkdtemp(prefix="bench-pool-"))
    started = time.monotonic()
    results: list[Measured] = []
    for pool in arguments.pools:
        found = await measure(arguments.postgres, pool, arguments.users, arguments.turns, logs)
        print(
            f"pool {found.pool}: {found.turns} turns in {found.seconds:.1f}s, {found.sessions} new sessions, "
            f"{found.cpu_ms:.1f} ms of server CPU a turn, {found.errors} errors",
            flush=True,
        )
        results.append(found)
    version = await postgres_version(arguments.postgres)
    text = render(results, arguments, version, time.monotonic() - started)
    print(text)
    if arguments.write:
        write_section(arguments.output, SECTION, text)
        print(f"wrote the {SECTION} section of {arguments.output}")
    return 1 if any(found.errors for found in results) else 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.pool", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--postgres", default=os.environ.get(POSTGRES_ENV))
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--turns", type=int, default=5, help="turns per user (default 5)")
    parser.add_argument("--pools", nargs="+", default=list(POOLS), help="size+overflow settings to compare")
    parser.add_argument("--write", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--output", type=Path, default=DOCS)
    return parser.parse_args(argv)


def main() -> int:
    return asyncio.run(main_async(parse()))


if __name__ == "__main__":
    raise SystemExit(main())
