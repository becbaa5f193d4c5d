"""Our `SqlConversationStore` against floors (sqlite3, aiosqlite, asyncpg) measured in the same run: one
turn (load the whole history, append, save) at each size, every system in this process, interleaved.

What is alive before the timing starts is frozen out of the garbage collector: otherwise each full
collection walks all of it inside whichever system's turn triggers it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Literal

from bench.harness.databases import available, scratch_database
from bench.harness.options import parser, publish
from bench.harness.reports import Clock, command_line, environment, table
from bench.harness.servers import folder
from bench.harness.stats import median, paired_ratio, rotated, times
from bench.store_messages import history, realistic_turn
from bench.store_systems import Backend, Contender, Ours, Timing, contenders

Part = Literal["load", "save", "total"]
FAIR_FLOOR_LIMIT = 1.5
FLAT_SAVE_LIMIT = 1.3
ASYNC_FLOOR_LIMIT = 1.5


@dataclass
class Results:
    names: dict[str, str] = field(default_factory=dict[str, str])
    """Each measured system's display name by its key."""
    unavailable: dict[str, str] = field(default_factory=dict[str, str])
    """Why a system wasn't measured, or stopped being measured, by its key."""
    timings: dict[str, dict[int, dict[int, Timing]]] = field(
        default_factory=dict[str, dict[int, dict[int, Timing]]]
    )
    """Per system, per history size, per round: one turn's timing."""

    def skip(self, key: str, reason: str) -> None:
        self.unavailable[key] = reason
        print(f"  {self.names.get(key, key)}: {reason}", flush=True)

    def sizes(self) -> list[int]:
        return sorted({size for by_size in self.timings.values() for size in by_size})

    def _parts(self, key: str, size: int, part: Part) -> dict[int, float]:
        return {round_: getattr(t, part) for round_, t in self.timings.get(key, {}).get(size, {}).items()}

    def median(self, key: str, size: int, part: Part) -> float:
        return median(self._parts(key, size, part).values())

    def ratio(self, key: str, other: str, size: int, part: Part, *, other_size: int | None = None) -> float:
        """`key`'s time over `other`'s, paired by round: at `size`, or against `other_size` for `other`."""
        return paired_ratio(self._parts(key, size, part), self._parts(other, other_size or size, part))


@dataclass(frozen=True)
class Section:
    """One dialect's results."""

    title: str
    results: Results
    pragmas: dict[str, str] | None = None


@dataclass(frozen=True)
class Check:
    """A target, as the ratio it is judged by: at most `limit`."""

    label: str
    ratio: float
    limit: float

    @property
    def verdict(self) -> str:
        return "n/a" if math.isnan(self.ratio) else "PASS" if self.ratio <= self.limit else "FAIL"

    def row(self) -> list[str]:
        return [self.label, times(self.ratio), f"at most {self.limit:g}x", f"**{self.verdict}**"]


def checks(section: Section) -> list[Check]:
    """The targets, each as the ratio it is judged by (on ours with no history cache: the floors' work)."""
    results, title = section.results, section.title
    sizes = results.sizes()
    found = [
        Check(
            f"{title}: load+save at {size:,} messages, ours / fair floor",
            results.ratio("ours", "fair", size, "total"),
            FAIR_FLOOR_LIMIT,
        )
        for size in sizes
    ]
    if len(sizes) > 1:
        flat = results.ratio("ours", "ours", sizes[-1], "save", other_size=sizes[0])
        label = f"{title}: save at {sizes[-1]:,} / save at {sizes[0]:,} messages (flat)"
        found.append(Check(label, flat, FLAT_SAVE_LIMIT))
    # Issue 14's target 5: within 1.5x of the async floor (aiosqlite; on PostgreSQL the fair floor is asyncpg).
    found += [
        Check(f"{title}: load+save at {size:,} messages, ours / async floor", ratio, ASYNC_FLOOR_LIMIT)
        for size in (10, 100)
        if not math.isnan(ratio := results.ratio("ours", "async", size, "total"))
    ]
    return found


def _ms(seconds: float) -> str:
    return "—" if math.isnan(seconds) else f"{seconds * 1000:.3g}"


def _timing_table(results: Results, part: Part) -> list[str]:
    keys = [key for key in results.names if key in results.timings]
    sizes = results.sizes()
    ratios: list[tuple[str, str, str, int | None]]
    if part == "total":
        # Ours against each floor that pays for decoding: the target's, and the async one when measured;
        # then ours with the history cached against the last of them, for reference.
        floors = [key for key in ("fair", "async") if key in keys]
        ratios = [(f"ours / {results.names[key]}", "ours", key, None) for key in floors]
        if "warm" in keys and floors:
            ratios.append((f"history cached / {results.names[floors[-1]]}", "warm", floors[-1], None))
    else:
        ratios = [(f"ours / ours at {sizes[0]:,}", "ours", "ours", sizes[0])] if sizes else []
    rows = [
        [
            f"{size:,}",
            *(_ms(results.median(key, size, part)) for key in keys),
            *(times(results.ratio(mine, other, size, part, other_size=at)) for _, mine, other, at in ratios),
        ]
        for size in sizes
    ]
    return table(["messages", *(results.names[key] for key in keys), *(title for title, *_ in ratios)], rows)


def _section(section: Section, repeats: int) -> list[str]:
    results = section.results
    lines = [f"### {section.title}", ""]
    if section.pragmas:
        pragmas = ", ".join(f"{name}={value}" for name, value in section.pragmas.items())
        lines += [f"Journal settings (ours, and the sqlite3 floors likewise): {pragmas}.", ""]
    return [
        *lines,
        f"One turn (load the whole history, append, save), median ms of {repeats} rounds:",
        "",
        *_timing_table(results, "total"),
        "",
        "Save only, from the same turns:",
        "",
        *_timing_table(results, "save"),
        "",
        *(f"- {results.names.get(key, key)}: {reason}" for key, reason in results.unavailable.items()),
        *([""] if results.unavailable else []),
    ]


def render(sections: Sequence[Section], repeats: int, environment_lines: Sequence[str]) -> list[str]:
    return [
        "### Environment",
        "",
        *environment_lines,
        "",
        *(line for section in sections for line in _section(section, repeats)),
        "### Targets",
        "",
        "Ratios are medians of paired ratios: turns of the same round.",
        "",
        *table("measure | ratio | target | verdict", [check.row() for s in sections for check in checks(s)]),
    ]


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
