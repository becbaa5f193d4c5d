"""The store benchmark's two workloads, every system in the same process, interleaved, rotating.

What is alive before the timing starts is frozen out of the garbage collector: otherwise each full
collection walks all of it inside whichever system's turn triggers it.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic_ai.messages import ModelMessage

from bench.harness.databases import Dialect, scratch_database
from bench.harness.stats import NAN, median, paired_ratio, rotated
from bench.store_messages import history, realistic_turn
from bench.store_systems import Backend, Timing

Part = Literal["load", "save", "total"]
MEASURED_TURN_BASE = 100_000
"""Turn numbers of the measured turns, away from those that built the histories."""
CONVERSATION_STRIDE = 999
"""Turn numbers between two conversations of the concurrent workload: a multiple of 3, so all have the
same tool turns."""


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...] = (10, 100, 1_000)
    warmup: int = 2
    repeats: int = 20
    conversations: int = 50
    turns: int = 20
    concurrent_runs: int = 3


@dataclass(frozen=True)
class Contender:
    key: str
    """A short, stable name: `ours`, `warm`, `floor`, `fair`, `async`, `memory`."""
    open: Callable[[str], Awaitable[Backend]]
    """Opens the system on a fresh database's URL."""


@dataclass
class Places:
    """Fresh databases of one dialect, one per system and workload, dropped with `stack`."""

    dialect: Dialect
    folder: Path
    postgres: str | None
    stack: AsyncExitStack
    count: int = 0

    async def new(self, label: str) -> str:
        self.count += 1
        name = f"{self.count:02d}-{label}"
        return await self.stack.enter_async_context(
            scratch_database(self.dialect, self.folder, name, self.postgres)
        )


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
    throughput: dict[str, dict[int, float]] = field(default_factory=dict[str, dict[int, float]])
    """Per system, per repetition: turns per second of the concurrent workload."""

    def sizes(self) -> list[int]:
        return sorted({size for by_size in self.timings.values() for size in by_size})

    def _parts(self, key: str, size: int, part: Part) -> dict[int, float]:
        return {round_: getattr(t, part) for round_, t in self.timings.get(key, {}).get(size, {}).items()}

    def median(self, key: str, size: int, part: Part) -> float:
        return median(self._parts(key, size, part).values())

    def ratio(self, key: str, other: str, size: int, part: Part, *, other_size: int | None = None) -> float:
        """`key`'s time over `other`'s, paired by round: at `size`, or against `other_size` for `other`."""
        return paired_ratio(self._parts(key, size, part), self._parts(other, other_size or size, part))

    def turns_per_second(self, key: str) -> float:
        return median(self.throughput[key].values()) if key in self.throughput else NAN

    def throughput_ratio(self, key: str, other: str) -> float:
        """`key`'s turns per second over `other`'s, paired by repetition."""
        return paired_ratio(self.throughput.get(key, {}), self.throughput.get(other, {}))


@cache
def _turn(number: int) -> tuple[ModelMessage, ...]:
    return tuple(realistic_turn(number))


def _skip(results: Results, key: str, reason: str) -> None:
    results.unavailable[key] = reason
    print(f"  {results.names.get(key, key)}: {reason}", flush=True)


async def _open(contender: Contender, url: str, results: Results) -> Backend | None:
    try:
        system = await contender.open(url)
    except Exception as error:  # a system that cannot open here is reported, not fatal
        _skip(results, contender.key, f"not measured: {error}")
        return None
    results.names[contender.key] = system.name
    return system


async def run_per_size(
    contenders: Sequence[Contender], places: Places, settings: Settings, results: Results
) -> None:
    """One turn (load + save) on conversations that already hold each size of history."""
    systems: dict[str, Backend] = {}
    for contender in (c for c in contenders if c.key not in results.unavailable):
        if (
            system := await _open(contender, await places.new(f"{contender.key}-sizes"), results)
        ) is not None:
            systems[contender.key] = system
    rounds = settings.warmup + settings.repeats
    try:
        started = time.perf_counter()
        for size in settings.sizes:
            for system in systems.values():
                system.prepare(f"history-{size}", history(size))
                for round_ in range(rounds):
                    await system.turn(f"size{size}-round{round_}", f"history-{size}")
        for system in systems.values():
            for round_ in range(rounds):
                system.prepare(f"turn-{round_}", _turn(MEASURED_TURN_BASE + round_))
        print(
            f"  filled {len(settings.sizes) * rounds} conversations each in {time.perf_counter() - started:.0f}s"
        )
        gc.collect()
        gc.freeze()
        started = time.perf_counter()
        for round_ in range(rounds):
            for step, size in enumerate(rotated(settings.sizes, round_)):
                for key, system in rotated(list(systems.items()), round_ + step):
                    if key in results.unavailable:
                        continue
                    try:
                        timing = await system.turn(f"size{size}-round{round_}", f"turn-{round_}")
                    except Exception as error:  # one system failing must not lose the others' results
                        _skip(results, key, f"failed at {size:,} messages: {error!r}")
                        continue
                    if round_ >= settings.warmup:
                        results.timings.setdefault(key, {}).setdefault(size, {})[round_] = timing
        print(f"  {rounds} rounds in {time.perf_counter() - started:.0f}s", flush=True)
    finally:
        gc.unfreeze()
        for system in systems.values():
            await system.aclose()


async def run_concurrent(
    contenders: Sequence[Contender], places: Places, settings: Settings, results: Results
) -> None:
    """`conversations` tasks at once, each doing `turns` turns."""
    turns = {
        (conversation, turn): _turn(conversation * CONVERSATION_STRIDE + turn)
        for conversation in range(settings.conversations)
        for turn in range(settings.turns)
    }
    for run in range(settings.concurrent_runs):
        for contender in rotated(contenders, run):
            if contender.key in results.unavailable:
                continue
            url = await places.new(f"{contender.key}-concurrent{run}")
            if (system := await _open(contender, url, results)) is None:
                continue
            for (conversation, turn), batch in turns.items():
                system.prepare(f"c{conversation}-t{turn}", batch)

            async def converse(conversation: int, system: Backend = system) -> None:
                for turn in range(settings.turns):
                    await system.turn(f"conversation-{conversation}", f"c{conversation}-t{turn}")

            gc.collect()
            gc.freeze()
            started = time.perf_counter()
            try:
                async with asyncio.TaskGroup() as group:
                    for conversation in range(settings.conversations):
                        group.create_task(converse(conversation))
            except Exception as error:  # one system failing must not lose the others' results
                _skip(results, contender.key, f"failed under concurrency: {error!r}")
                continue
            finally:
                elapsed = time.perf_counter() - started
                gc.unfreeze()
                await system.aclose()
            rate = settings.conversations * settings.turns / elapsed
            results.throughput.setdefault(contender.key, {})[run] = rate
            print(f"  run {run + 1}, {results.names[contender.key]}: {rate:,.0f} turns/s", flush=True)
