"""Our `SqlConversationStore` against floors (sqlite3, aiosqlite, asyncpg) measured in the same run.

The workloads are in `bench.store_workloads`, the systems in `bench.store_systems`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from contextlib import AsyncExitStack
from pathlib import Path

from bench.harness.databases import Dialect, available
from bench.harness.options import parser, publish
from bench.harness.reports import Clock, command_line, environment
from bench.harness.servers import folder
from bench.store_report import Section, checks, render
from bench.store_systems import (
    Backend,
    Ours,
    PydanticStoreBackend,
    aiosqlite_floor,
    asyncpg_floor,
    sqlite_floor,
)
from bench.store_workloads import Contender, Places, Results, Settings, run_concurrent, run_per_size

FULL = Settings()
QUICK = Settings(warmup=1, repeats=3, turns=4, concurrent_runs=1)
WARM_CACHE_BYTES = 1 << 30
"""The history cache of `warm`: room for every history of a full run (~75 MB charged at 22 rounds)."""


def contenders(ours: Ours, dialect: Dialect) -> list[Contender]:
    """Every system measured on `dialect`, ours first, as the SQLite floors copy its journal settings.
    Ours twice: `ours` with no history cache, judged (the floors' work); `warm` with every history
    cached, reported (`docs/benchmarks.md`, the store's method)."""

    async def memory(url: str) -> Backend:
        return PydanticStoreBackend.in_memory()

    found = [
        Contender("ours", lambda url: ours.open(url, history_cache_bytes=0, label=", no history cache")),
        Contender(
            "warm", lambda url: ours.open(url, history_cache_bytes=WARM_CACHE_BYTES, label=", history cached")
        ),
    ]
    if dialect == "PostgreSQL":
        return [
            *found,
            Contender("floor", lambda url: asyncpg_floor(url, encode=False)),
            Contender("fair", lambda url: asyncpg_floor(url, encode=True)),
        ]
    return [
        *found,
        Contender("floor", lambda url: sqlite_floor(url, ours, encode=False)),
        Contender("fair", lambda url: sqlite_floor(url, ours, encode=True)),
        Contender("async", lambda url: aiosqlite_floor(url, ours)),
        Contender("memory", memory),
    ]


async def run(
    arguments: argparse.Namespace, settings: Settings, notes: list[str], logs: Path
) -> tuple[list[Section], str | None]:
    ours = Ours()
    databases, version = await available(arguments.postgres, notes)
    sections: list[Section] = []
    for dialect in databases:
        async with AsyncExitStack() as stack:
            places, results = Places(dialect, logs, arguments.postgres, stack), Results()
            print(
                f"{dialect}: one turn at {', '.join(f'{size:,}' for size in settings.sizes)} messages",
                flush=True,
            )
            await run_per_size(contenders(ours, dialect), places, settings, results)
            print(
                f"{dialect}: {settings.conversations} conversations x {settings.turns} turns, all at once",
                flush=True,
            )
            await run_concurrent(contenders(ours, dialect), places, settings, results)
            sections.append(Section(dialect, results, dict(ours.pragmas) if dialect == "SQLite" else None))
    return sections, version


def main() -> int:
    arguments = parser("bench.store", __doc__, strict=True).parse_args()
    settings = QUICK if arguments.quick else FULL
    clock, notes = Clock(), list[str]()
    with folder("store", keep=arguments.keep_logs) as logs:
        sections, version = asyncio.run(run(arguments, settings, notes, logs))
    rounds = (
        f"Settings: {settings.warmup} warm-up + {settings.repeats} measured turns per size and system, "
        f"{settings.concurrent_runs} concurrent run(s)"
    )
    lines = environment(
        command_line("bench.store", sys.argv[1:]), postgres=version, notes=[rounds, *notes, clock.line()]
    )
    publish(arguments, {"store": "\n".join(render(sections, settings, lines))}, full=not arguments.quick)
    failed = [check for section in sections for check in checks(section) if check.verdict == "FAIL"]
    return 1 if failed and arguments.strict else 0


if __name__ == "__main__":
    sys.exit(main())
