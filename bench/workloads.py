"""The two workloads, run over every system in the same process and interleaved.

The machine is shared and noisy, so no system (and no history size) is measured in one block.
Per-size workload: every conversation is filled first, then each round takes one turn of every
system at every size, in an order that rotates from round to round. Concurrent workload: each
repetition runs every system once, again in rotating order.

What is alive before the timing starts (the in-memory store's conversations, every system's
prepared messages) is frozen out of the garbage collector: otherwise each full collection walks
all of it, some 150 ms here, inside whichever system's turn happens to trigger it.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TypeVar

from pydantic_ai.messages import ModelMessage

from bench.locations import Scratch
from bench.messages import history, message_json, realistic_turn
from bench.results import Results, Settings
from bench.systems import Location, System

__all__ = ["Contender", "run_concurrent", "run_per_size"]

T = TypeVar("T")
Opener = Callable[[Location], Awaitable[System]]

MEASURED_TURN_BASE = 100_000
"""Turn numbers of the measured turns, away from those that built the histories."""
CONVERSATION_STRIDE = 999
"""Turn numbers between two conversations of the concurrent workload: a multiple of 3, so all have the
same tool turns."""


@dataclass(frozen=True)
class Contender:
    key: str
    """A short, stable name: `ours`, `floor`, `fair`, `memory`, `openai`, `langgraph`."""
    open: Opener
    on_disk: bool = True


@cache
def _turn(number: int) -> tuple[ModelMessage, ...]:
    return tuple(realistic_turn(number))


def _rotated(items: Sequence[T], by: int) -> list[T]:
    by %= max(len(items), 1)
    return [*items[by:], *items[:by]]


def _skip(results: Results, key: str, reason: str) -> None:
    results.unavailable[key] = reason
    print(f"  {results.names.get(key, key)}: {reason}", flush=True)


async def _open(contender: Contender, location: Location, results: Results) -> System | None:
    try:
        system = await contender.open(location)
    except Exception as error:  # a rival missing or broken here is reported, not fatal
        _skip(results, contender.key, f"not measured: {error}")
        return None
    results.names[contender.key] = system.name
    return system


async def run_per_size(
    contenders: Sequence[Contender], scratch: Scratch, settings: Settings, results: Results
) -> None:
    """One turn (load + save) on conversations that already hold each size of history."""
    systems: dict[str, System] = {}
    for contender in contenders:
        if contender.key in results.unavailable:
            continue
        location = await scratch.new(f"{contender.key}-sizes")
        if (system := await _open(contender, location, results)) is not None:
            systems[contender.key] = system
    rounds = settings.warmup + settings.repeats
    try:
        started = time.perf_counter()
        for size in settings.sizes:
            prefix = history(size)
            for system in systems.values():
                system.prepare(f"history-{size}", prefix)
                for round_ in range(rounds):
                    await system.prefill(f"size{size}-round{round_}", f"history-{size}")
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
            for step, size in enumerate(_rotated(settings.sizes, round_)):
                for key, system in _rotated(list(systems.items()), round_ + step):
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
    contenders: Sequence[Contender], scratch: Scratch, settings: Settings, results: Results
) -> None:
    """`conversations` tasks at once, each doing `turns` turns; then what the data takes on disk."""
    turns = {
        (conversation, turn): _turn(conversation * CONVERSATION_STRIDE + turn)
        for conversation in range(settings.conversations)
        for turn in range(settings.turns)
    }
    results.raw_json_bytes = sum(len(message_json(m)) for batch in turns.values() for m in batch)
    for run in range(settings.concurrent_runs):
        for contender in _rotated(contenders, run):
            if contender.key in results.unavailable:
                continue
            location = await scratch.new(f"{contender.key}-concurrent{run}")
            if (system := await _open(contender, location, results)) is None:
                continue
            for (conversation, turn), batch in turns.items():
                system.prepare(f"c{conversation}-t{turn}", batch)

            async def converse(conversation: int, system: System = system) -> None:
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
            if contender.on_disk and run == settings.concurrent_runs - 1:
                results.storage[contender.key] = await scratch.storage_bytes(location)
