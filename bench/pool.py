"""PostgreSQL sessions a server opens under load, by pool size: what `DURABLE_CHAT_POOL_SIZE` is for.

The database's `sessions` counter (`pg_stat_database`, PostgreSQL 14 and later) before and after the
turns, after a warm-up that opened what the pools keep.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from bench.harness.clients import Load, run_load
from bench.harness.databases import connected, postgres_database, postgres_version, prepare_shop
from bench.harness.options import parser, publish
from bench.harness.reports import Clock, command_line, environment, section, table
from bench.harness.servers import UNLIMITED, folder, ours_argv, raise_open_files_limit, server_env, serving

SECTION = "pool-sessions"
POOLS = ("10+20", "20+10", "30+0")
"""`size+overflow`: the defaults before this benchmark, the next ones (fine at 20 users, not at 200),
and today's: the same 30 at most, all kept."""


@dataclass(frozen=True)
class Measured:
    """A pool setting's turns, their seconds, the new sessions on the database meanwhile, errors, and the
    server's CPU (user and system, every thread) per turn in ms."""

    pool: str
    turns: int
    seconds: float
    sessions: int
    errors: int
    cpu_ms: float = 0.0


async def _sessions(url: str) -> int:
    """The database's `sessions` counter: sessions established since the statistics were reset."""
    async with connected(url) as connection:
        # The statistics a backend reads are a snapshot per transaction: a new one each time.
        await connection.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
        query = sa.text("SELECT sessions FROM pg_stat_database WHERE datname = :name")
        return int((await connection.execute(query, {"name": make_url(url).database})).scalar_one())


async def measure(server_url: str, pool: str, users: int, turns: int, logs: Path) -> Measured:
    size, overflow = pool.split("+")
    env = server_env(UNLIMITED | {"DURABLE_CHAT_POOL_SIZE": size, "DURABLE_CHAT_POOL_MAX_OVERFLOW": overflow})
    async with postgres_database(server_url) as url:
        await prepare_shop(url)
        async with serving(f"pool-{size}-{overflow}", ours_argv(url), env, logs) as server:
            # The warm-up opens what the pools keep; the counter then counts what the load adds.
            await run_load(server.base_url, Load(users=users, turns=2, deadline=600))
            await asyncio.sleep(0.5)  # the statistics are sent by each backend within 500 ms
            before, cpu_before, started = await _sessions(url), server.cpu_seconds(), time.monotonic()
            result = await run_load(server.base_url, Load(users=users, turns=turns, deadline=600))
            elapsed, cpu = time.monotonic() - started, server.cpu_seconds() - cpu_before
            await asyncio.sleep(1.0)
            # Our own read of the counter is a session too: one, counted in `before`'s reading.
            after = await _sessions(url) - 1
    turns_done = max(result.completed_turns, 1)
    return Measured(
        pool, result.completed_turns, elapsed, after - before, result.error_count, 1000 * cpu / turns_done
    )


def render(results: Sequence[Measured], users: int, turns: int, environment_lines: Sequence[str]) -> str:
    rows = [
        [
            m.pool,
            m.turns,
            f"{m.seconds:.1f}",
            m.sessions,
            f"{100 * m.sessions / max(m.turns, 1):.1f}",
            f"{m.cpu_ms:.1f}",
            m.errors,
        ]
        for m in results
    ]
    header = "pool (size + overflow) | turns | seconds | new sessions | new sessions per 100 turns | server CPU ms/turn | errors"
    lead = f"{users} users take {turns} demo turns each over the native API, after a warm-up of 2 turns each."
    return "\n".join([*section(environment_lines), lead, "", *table(header, rows)])


async def run(server_url: str, pools: Sequence[str], users: int, turns: int, logs: Path) -> list[Measured]:
    results: list[Measured] = []
    for pool in pools:
        results.append(found := await measure(server_url, pool, users, turns, logs))
        print(
            f"pool {found.pool}: {found.turns} turns in {found.seconds:.1f}s, {found.sessions} new sessions, "
            f"{found.cpu_ms:.1f} ms of server CPU a turn, {found.errors} errors",
            flush=True,
        )
    return results


def main() -> int:
    options = parser("bench.pool", __doc__, quick=None, postgres="required")
    options.add_argument("--users", type=int, default=200)
    options.add_argument("--turns", type=int, default=5, help="turns per user (default 5)")
    options.add_argument("--pools", nargs="+", default=list(POOLS), help="size+overflow settings to compare")
    arguments = options.parse_args()
    if not arguments.postgres:
        options.error("needs PostgreSQL: pass --postgres URL or set $DURABLE_CHAT_TEST_POSTGRES_URL")
    raise_open_files_limit()
    clock = Clock()
    with folder("pool", keep=arguments.keep_logs) as logs:
        results = asyncio.run(
            run(arguments.postgres, arguments.pools, arguments.users, arguments.turns, logs)
        )
    version = asyncio.run(postgres_version(arguments.postgres))
    lines = environment(command_line("bench.pool", sys.argv[1:]), postgres=version, notes=[clock.line()])
    publish(arguments, {SECTION: render(results, arguments.users, arguments.turns, lines)}, full=True)
    return 1 if any(found.errors for found in results) else 0


if __name__ == "__main__":
    sys.exit(main())
