"""Our `SqlConversationStore` against floors (sqlite3, aiosqlite, asyncpg) measured in the same run: one
turn (load the whole history, append, save) at each size, every system in this process, interleaved.

What is alive before the timing starts is frozen out of the garbage collector: otherwise each full
collection walks all of it inside whichever system's turn triggers it. The systems are in
`bench.store_systems`, the tables and targets in `bench.store_report`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from bench.harness.databases import available, scratch_database
from bench.harness.options import parser, publish
from bench.harness.reports import Clock, command_line, environment
from bench.harness.servers import folder
from bench.harness.stats import rotated
from bench.store_messages import history, realistic_turn
from bench.store_report import Results, Section, checks, render
from bench.store_systems import Backend, Contender, Ours, contenders

MEASURED_TURN_BASE = 100_000
"""Turn numbers of the measured turns, away from those that built the histories."""


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...] = (10, 100, 1_000)
    warmup: int = 2
    repeats: int = 20


FULL, QUICK = Settings(), Settings(warmup=1, repeats=3)


async def run_per_size(
    contenders: Sequence[Contender],
    scratch: Callable[[str], AbstractAsyncContextManager[str]],
    settings: Settings,
    results: Results,
) -> None:
    """One turn (load + save) on conversations that already hold each size of history; every system on
    a database of its own from `scratch(name)`, dropped afterwards."""
    rounds = settings.warmup + settings.repeats
    measured = [tuple(realistic_turn(MEASURED_TURN_BASE + round_)) for round_ in range(rounds)]
    async with AsyncExitStack() as stack:
        systems: dict[str, Backend] = {}
        for contender in contenders:
            url = await stack.enter_async_context(scratch(f"{contender.key}-sizes"))
            try:
                system = await contender.open(url)
            except Exception as error:  # a system that cannot open here is reported, not fatal
                results.skip(contender.key, f"not measured: {error}")
                continue
            stack.push_async_callback(system.aclose)
            results.names[contender.key], systems[contender.key] = system.name, system
        started = time.perf_counter()
        for size in settings.sizes:
            for system in systems.values():
                system.prepare(f"history-{size}", history(size))
                for round_ in range(rounds):
                    await system.turn(f"size{size}-round{round_}", f"history-{size}")
        for system in systems.values():
            for round_, turn in enumerate(measured):
                system.prepare(f"turn-{round_}", turn)
        print(
            f"  filled {len(settings.sizes) * rounds} conversations each in {time.perf_counter() - started:.0f}s"
        )
        gc.collect()
        gc.freeze()
        try:
            started = time.perf_counter()
            for round_ in range(rounds):
                for step, size in enumerate(rotated(settings.sizes, round_)):
                    for key, system in rotated(list(systems.items()), round_ + step):
                        if key in results.unavailable:
                            continue
                        try:
                            timing = await system.turn(f"size{size}-round{round_}", f"turn-{round_}")
                        except Exception as error:  # one system failing must not lose the others' results
                            results.skip(key, f"failed at {size:,} messages: {error!r}")
                            continue
                        if round_ >= settings.warmup:
                            results.timings.setdefault(key, {}).setdefault(size, {})[round_] = timing
            print(f"  {rounds} rounds in {time.perf_counter() - started:.0f}s", flush=True)
        finally:
            gc.unfreeze()


async def run(
    arguments: argparse.Namespace, settings: Settings, notes: list[str], logs: Path
) -> tuple[list[Section], str | None]:
    databases, version = await available(arguments.postgres, notes)
    sections: list[Section] = []
    for dialect in databases:
        print(
            f"{dialect}: one turn at {', '.join(f'{size:,}' for size in settings.sizes)} messages", flush=True
        )
        ours, results = Ours(), Results()
        scratch = partial(scratch_database, dialect, logs, postgres=arguments.postgres)
        await run_per_size(contenders(ours, dialect), scratch, settings, results)
        sections.append(Section(dialect, results, dict(ours.pragmas) if dialect == "SQLite" else None))
    return sections, version


def main() -> int:
    arguments = parser("bench.store", __doc__, strict=True).parse_args()
    settings = QUICK if arguments.quick else FULL
    clock, notes = Clock(), list[str]()
    with folder("store", keep=arguments.keep_logs) as logs:
        sections, version = asyncio.run(run(arguments, settings, notes, logs))
    rounds = f"Settings: {settings.warmup} warm-up + {settings.repeats} measured turns per size and system"
    lines = environment(
        command_line("bench.store", sys.argv[1:]), postgres=version, notes=[rounds, *notes, clock.line()]
    )
    publish(
        arguments, {"store": "\n".join(render(sections, settings.repeats, lines))}, full=not arguments.quick
    )
    failed = [check for section in sections for check in checks(section) if check.verdict == "FAIL"]
    return 1 if failed and arguments.strict else 0


if __name__ == "__main__":
    sys.exit(main())
