"""Benchmark our `SqlConversationStore` against floors and rivals measured in the same run.

    python -m bench.store [--quick] [--postgres URL] [--no-write] [--profile]

Prints the tables with a verdict per target, and writes them to the store section of
`docs/benchmarks.md` (a full run only, unless `--write`).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import shlex
import sys
import time
from pathlib import Path

from sqlalchemy.engine import make_url

from bench.floors import AiosqliteFloor, AsyncpgFloor, SqliteFloor
from bench.locations import PostgresScratch, Scratch, SqliteScratch
from bench.messages import history, realistic_turn
from bench.ours import Ours, find_ours
from bench.report import Section, checks, environment, render
from bench.results import Results, Settings
from bench.rivals import open_langgraph, open_openai_agents
from bench.sections import write_section
from bench.systems import Location, PydanticStoreBackend, System
from bench.workloads import Contender, run_concurrent, run_per_size

POSTGRES_ENV = "DURABLE_CHAT_TEST_POSTGRES_URL"
FULL = Settings()
QUICK = Settings(warmup=1, repeats=3, turns=4, concurrent_runs=1)
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def sqlite_contenders(ours: Ours) -> list[Contender]:
    async def floor(location: Location) -> System:
        assert location.path is not None
        return SqliteFloor(location.path, encode=False, pragmas=ours.pragmas)

    async def fair(location: Location) -> System:
        assert location.path is not None
        return SqliteFloor(location.path, encode=True, pragmas=ours.pragmas)

    async def async_fair(location: Location) -> System:
        assert location.path is not None
        return await AiosqliteFloor.open(location.path, pragmas=ours.pragmas)

    async def memory(location: Location) -> System:
        return PydanticStoreBackend.in_memory()

    # Ours first: the floors copy the journal settings it is found to use.
    return [
        Contender("ours", ours.open, on_disk=ours.stand_in_reason is None),
        Contender("floor", floor),
        Contender("fair", fair),
        Contender("async", async_fair),
        Contender("memory", memory, on_disk=False),
        Contender("openai", open_openai_agents),
        Contender("langgraph", open_langgraph),
    ]


def postgres_contenders(ours: Ours) -> list[Contender]:
    async def floor(location: Location) -> System:
        return await AsyncpgFloor.open(location, encode=False)

    async def fair(location: Location) -> System:
        return await AsyncpgFloor.open(location, encode=True)

    return [
        Contender("ours", ours.open, on_disk=ours.stand_in_reason is None),
        Contender("floor", floor),
        Contender("fair", fair),
        Contender("openai", open_openai_agents),
    ]


async def measure(contenders: list[Contender], scratch: Scratch, settings: Settings) -> Results:
    results = Results()
    try:
        print(
            f"{scratch.title}: one turn at {', '.join(f'{s:,}' for s in settings.sizes)} messages", flush=True
        )
        await run_per_size(contenders, scratch, settings, results)
        print(
            f"{scratch.title}: {settings.conversations} conversations x {settings.turns} turns, all at once",
            flush=True,
        )
        await run_concurrent(contenders, scratch, settings, results)
    finally:
        await scratch.aclose()
    return results


async def profile(ours: Ours, size: int, turns: int) -> None:
    """Where a turn's time goes in our store at `size` messages, on SQLite (the event loop's thread only)."""
    scratch = SqliteScratch()
    try:
        system = await ours.open(await scratch.new("profile"))
        system.prepare("history", history(size))
        for turn in range(turns):
            system.prepare(f"turn-{turn}", realistic_turn(turn))
            await system.prefill(f"profile-{turn}", "history")
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        for turn in range(turns):
            await system.turn(f"profile-{turn}", f"turn-{turn}")
        profiler.disable()
        elapsed = time.perf_counter() - started
        print(
            f"\n{turns} turns at {size:,} messages: {elapsed / turns * 1000:.1f} ms each, profiler included"
        )
        stats = pstats.Stats(profiler, stream=sys.stdout).strip_dirs()
        stats.sort_stats("cumulative").print_stats(30)
        stats.sort_stats("tottime").print_stats(20)
        await system.aclose()
    finally:
        await scratch.aclose()


async def main(arguments: argparse.Namespace) -> int:
    settings = QUICK if arguments.quick else FULL
    ours = find_ours()
    notes: list[str] = [
        f"Settings: {settings.warmup} warm-up + {settings.repeats} measured turns per size and system, "
        f"{settings.concurrent_runs} concurrent run(s)",
    ]
    if ours.stand_in_reason is not None:
        print(
            f"NOTE: measuring InMemoryConversationStore in place of ours: {ours.stand_in_reason}", flush=True
        )
        notes.append(f"**Ours is a stand-in (InMemoryConversationStore)**: {ours.stand_in_reason}")
    if arguments.profile is not None:
        await profile(ours, arguments.profile, arguments.profile_turns)
        return 0
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    sqlite = await measure(sqlite_contenders(ours), SqliteScratch(arguments.dir), settings)
    sections = [Section("SQLite", sqlite, dict(ours.pragmas))]
    postgres_version: str | None = None
    if arguments.postgres:
        try:
            scratch = await PostgresScratch.connect(arguments.postgres)
        except Exception as error:  # any failure to reach it: report it, keep the SQLite results
            where = make_url(arguments.postgres).render_as_string(hide_password=True)
            print(f"PostgreSQL skipped: cannot connect to {where!r}: {error!r}", flush=True)
            notes.append(f"PostgreSQL not measured: {error!r}")
        else:
            postgres_version = scratch.server_version
            sections.append(
                Section("PostgreSQL", await measure(postgres_contenders(ours), scratch, settings))
            )
    else:
        notes.append(f"PostgreSQL not measured: pass --postgres URL or set {POSTGRES_ENV}")
    notes.append(
        f"Run time: {time.perf_counter() - started:.0f}s; load average (1 min) "
        f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores"
    )
    # The URL may carry a password: the command is written down without it.
    command = shlex.join(["python", "-m", "bench.store", *(arg for arg in sys.argv[1:] if "://" not in arg)])
    lines = render(sections, settings, environment(command, postgres_version, notes))
    print("\n" + "\n".join(lines), flush=True)
    write = arguments.write if arguments.write is not None else not arguments.quick
    if write:
        write_section(arguments.output, "store", "\n".join(["## Conversation store", "", *lines]))
        print(f"\nWrote the store section of {arguments.output}")
    failed = [check for section in sections for check in checks(section) if check.verdict == "FAIL"]
    return 1 if failed and arguments.strict else 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.store",
        description="Benchmark our conversation store against floors and rivals.",
    )
    parser.add_argument("--quick", action="store_true", help="a short run, to check the benchmark works")
    parser.add_argument(
        "--postgres",
        metavar="URL",
        default=os.environ.get(POSTGRES_ENV),
        help=f"also run on PostgreSQL (postgresql+asyncpg://…); a scratch database is created and dropped "
        f"(default: ${POSTGRES_ENV})",
    )
    parser.add_argument("--no-postgres", dest="postgres", action="store_const", const=None)
    parser.add_argument(
        "--write",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write the results to --output (default: on for a full run, off for --quick)",
    )
    parser.add_argument("--output", type=Path, default=DOCS)
    parser.add_argument("--dir", help="where to put the SQLite files (default: the system's temp directory)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--profile",
        nargs="?",
        const=1_000,
        type=int,
        metavar="MESSAGES",
        help="instead, profile our store's turns at this many messages (default 1,000) on SQLite",
    )
    parser.add_argument("--profile-turns", type=int, default=20)
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
