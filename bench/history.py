"""Flat in history (issue 29, target 2): a turn of the plain app on a ~1,000-message thread against one
on a fresh thread, ours (`run_step`) and the same agent with nothing stored (method: `docs/benchmarks.md`)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic_ai.conversation_store import ConversationEntry
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from agent import ChatApp, Runtime
from bench.harness.databases import available
from bench.harness.options import parser, publish
from bench.harness.plain_app import build_agent
from bench.harness.reports import PACKAGES, Clock, command_line, environment, section, table
from bench.harness.servers import SERVER_CORE, folder, pin_this_process
from bench.harness.stats import median, ms, times
from bench.harness.turns import Turn, bare_turn, bench_runtime, queued
from store import CachedHistory, copied_every

LIMIT = 1.2
"""(ours long - the peer's growth) / ours fresh at most this (issue 29's target 2)."""
SPREAD = 0.2
"""Every round's ratio within this of the median: a measurement stable enough to gate on."""
SIDES = ("ours fresh", "ours long", "bare fresh", "bare long")


@dataclass(frozen=True)
class Settings:
    messages: int = 1000
    """The long thread's size before the first measured turn (4 messages a turn of the plain app)."""
    copies: int = 5
    """More long threads, copies of the first, taking the quadruples in turn."""
    warmup: int = 3
    """Quadruples (one turn of every side) before the first round, not measured."""
    rounds: int = 5
    per_round: int = 20
    """Quadruples per round: a round's figure is each side's median over them."""


FULL, QUICK = Settings(), Settings(messages=200, copies=1, warmup=1, rounds=2, per_round=3)
Quadruple = dict[str, tuple[float, float]]
"""One turn of every side (CPU and wall seconds), back to back (within half a second: at one speed of the core)."""


def quadruple_ratio(quadruple: Quadruple, copy: float = 0.0) -> float:
    """(ours long + `copy` - (bare long - bare fresh)) / ours fresh on CPU time, within one quadruple:
    its four turns ran at the same speed of the core, which the ratio then cancels. `copy`: what the
    history cache's copies (`CachedHistory.packed`) cost a long turn, spread over the turns between
    two of them."""
    cpu = {side: sample[0] for side, sample in quadruple.items()}
    return (cpu["ours long"] + copy - (cpu["bare long"] - cpu["bare fresh"])) / cpu["ours fresh"]


@dataclass(frozen=True)
class Copy:
    """The history cache's copy of a long thread's history (`CachedHistory.packed`), timed apart and
    charged to each long turn as its share. The few measured turns that make a copy pay it again (the
    medians set them aside): the charge is on top of them, not instead."""

    messages: int
    seconds: float
    """CPU time of one copy, the median of `COPIES`."""
    every: int
    """New messages between two copies at this length."""

    @property
    def per_turn(self) -> float:
        return self.seconds * MESSAGES_PER_TURN / self.every


COPIES = 5
MESSAGES_PER_TURN = 4
"""The plain app's turn: the question, the lookup's call and result, the answer."""


async def timed_copy(bench: Bench) -> Copy:
    """What `CachedHistory.packed` takes to copy the long thread's history, and how often it does."""
    messages = await bench.messages(bench.long_thread)
    entries = tuple(
        ConversationEntry(id=str(index), parent_id=None, message=message)
        for index, message in enumerate(messages)
    )
    seconds: list[float] = []
    for _ in range(COPIES):
        history = CachedHistory(entries, (0,) * len(entries), packed=0)
        gc.collect()
        started = time.process_time()
        copied = history.packed()
        seconds.append(time.process_time() - started)
        assert copied[0].message is not entries[0].message, "the copy was not made"
    every = copied_every(len(entries))
    return Copy(len(entries), median(seconds), every)


@dataclass
class Result:
    database: str
    rounds: list[list[Quadruple]]
    sizes: tuple[int, int]
    """The long thread's messages at the first and the last measured turn."""
    copy: Copy

    @property
    def ratios(self) -> list[float]:
        """Each round's: the median of its quadruples' ratios."""
        return [median(quadruple_ratio(q, self.copy.per_turn) for q in round_) for round_ in self.rounds]

    @property
    def ratio(self) -> float:
        """The median of every measured quadruple's ratio."""
        return median(quadruple_ratio(q, self.copy.per_turn) for round_ in self.rounds for q in round_)

    @property
    def spread(self) -> float:
        return max(abs(ratio - self.ratio) for ratio in self.ratios)

    @property
    def passed(self) -> bool:
        return self.ratio <= LIMIT and self.spread <= SPREAD

    def side(self, name: str, wall: bool = False) -> float:
        """The median of the rounds' medians of `name`'s CPU (or wall) time."""
        return median(median(q[name][int(wall)] for q in round_) for round_ in self.rounds)


class Bench:
    """The plain app on one database: long threads used in turn, and a new thread for each fresh turn."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.long_threads: list[str] = []
        self.turns = 0

    @property
    def long_thread(self) -> str:
        """The long thread of the current quadruple."""
        return self.long_threads[self.turns % len(self.long_threads)]

    async def grow(self, messages: int, copies: int) -> None:
        """`1 + copies` long threads played turn by turn through the step, in turn, until each holds
        its size: each takes one quadruple in turn, so that none grows by more than a few messages
        during the run. Each is grown as a real thread is (its history cached, stored and decoded a
        turn at a time, among the other threads' turns), never saved at once.

        The sizes are `messages` and more, spread evenly over the messages between two of the history
        cache's copies (`CachedHistory.packed`): the measured turns meet every length of history
        added since the last copy, as a long thread does over its life, not only the turns just
        after a copy."""
        db = self.runtime.db
        self.long_threads = [
            (await db.threads.create(user_id="bench", title="long")).thread_id for _ in range(1 + copies)
        ]
        cycle = copied_every(messages)
        targets = {
            thread_id: messages + n * cycle // (1 + copies) for n, thread_id in enumerate(self.long_threads)
        }
        sizes = dict.fromkeys(self.long_threads, 0)
        while any(sizes[thread_id] < target for thread_id, target in targets.items()):
            for thread_id, target in targets.items():
                if sizes[thread_id] < target:
                    await (await queued(self.runtime, thread_id))()
                    sizes[thread_id] = len(await self.messages(thread_id))
            print(
                f"\r  growing {len(self.long_threads)} long threads: {min(sizes.values())} messages",
                end="",
                flush=True,
            )
        print(flush=True)

    async def messages(self, thread_id: str) -> list[ModelMessage]:
        loaded = await self.runtime.db.conversations.load(thread_id)
        return [] if loaded is None else loaded.messages

    async def sizes(self) -> tuple[int, int]:
        found = [len(await self.messages(thread_id)) for thread_id in self.long_threads]
        return min(found), max(found)

    async def bare(self, long: bool) -> Turn:
        """The same turn with nothing stored, on a copy of the long thread's messages as they are now."""
        messages = []
        if long:
            # Decoded from the stored JSON, as ours' history cache holds them (and as a server that
            # stores nothing gets them from its client): pydantic-ai's run differs on messages built
            # otherwise (a deep copy's, or ones made in code).
            loaded = await self.messages(self.long_thread)
            messages = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(loaded))
        return bare_turn(self.runtime, messages)

    async def prepare(self, side: str) -> Turn:
        if side.startswith("ours"):
            return await queued(self.runtime, self.long_thread if side == "ours long" else None)
        return await self.bare(side == "bare long")


async def timed(turn: Turn, collect: bool) -> tuple[float, float]:
    """One turn's CPU time (every thread of this process: aiosqlite's too) and wall time.

    With `collect`, the heap is collected before and the collector is off during the turn, so a
    collection due from earlier work lands in no turn.
    """
    if collect:
        gc.collect()
        gc.disable()
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        await turn()
        return time.process_time() - cpu, time.perf_counter() - wall
    finally:
        if collect:
            gc.enable()


def _settle(collect: bool) -> None:
    """Collect, then move every surviving object (the long threads' cached histories among them) out
    of the collector's reach: the collection before each turn then costs the same at any history."""
    if collect:
        gc.collect()
        gc.freeze()


async def measure(bench: Bench, settings: Settings, collect: bool, title: str) -> list[list[Quadruple]]:
    """Quadruples of turns, one of every side in an order that rotates; rounds of `per_round` of them."""
    rounds: list[list[Quadruple]] = []
    _settle(collect)
    total = settings.warmup + settings.rounds * settings.per_round
    for number in range(total):
        samples: Quadruple = {}
        for side in SIDES[number % 4 :] + SIDES[: number % 4]:
            turn = await bench.prepare(side)
            samples[side] = await timed(turn, collect)
        bench.turns += 1
        if (measured := number - settings.warmup) >= 0:
            if measured % settings.per_round == 0:
                rounds.append([])
                _settle(collect)
            rounds[-1].append(samples)
        print(f"\r  {title}: quadruple {number + 1}/{total}", end="", flush=True)
    print(flush=True)
    return rounds


async def run(
    arguments: argparse.Namespace, settings: Settings, notes: list[str], logs: Path
) -> tuple[list[Result], str | None]:
    databases, version = await available(arguments.postgres, notes)
    results: list[Result] = []
    for database in databases:
        async with bench_runtime(
            ChatApp(agent=build_agent()), database, logs, "history", arguments.postgres
        ) as runtime:
            bench = Bench(runtime)
            print(f"{database}:", flush=True)
            await bench.grow(settings.messages, settings.copies)
            first = await bench.sizes()
            rounds = await measure(bench, settings, not arguments.keep_gc, database)
            copy = await timed_copy(bench)
            result = Result(database, rounds, (first[0], (await bench.sizes())[1]), copy)
        print(
            f"  rounds {', '.join(f'{ratio:.2f}' for ratio in result.ratios)}: median {result.ratio:.2f}, "
            f"spread ±{result.spread:.2f}; a copy {result.copy.seconds * 1000:.1f} ms every {result.copy.every}",
            flush=True,
        )
        results.append(result)
    return results, version


def render(results: list[Result], lines: list[str]) -> list[str]:
    out = section(lines)
    out += ["CPU time of one turn (this process, every thread), median of the rounds' medians, ms:", ""]
    out += table(
        ["database", "long thread (messages)", *SIDES, "peer's growth", "ratio", "rounds", "spread"],
        [
            [
                result.database,
                f"{result.sizes[0]:,} to {result.sizes[1]:,}",
                *(ms(result.side(side), 2) for side in SIDES),
                ms(result.side("bare long") - result.side("bare fresh"), 2),
                times(result.ratio),
                ", ".join(f"{ratio:.2f}" for ratio in result.ratios),
                f"±{result.spread:.2f}",
            ]
            for result in results
        ],
    )
    out += [
        "",
        "The history cache's copy of a long thread's history (`CachedHistory.packed`), CPU, charged to ours long in the ratio:",
        "",
    ]
    out += table(
        ["database", "messages", "one copy", "every (new messages)", "per long turn"],
        [
            [
                result.database,
                f"{result.copy.messages:,}",
                ms(result.copy.seconds, 2),
                f"{result.copy.every:,}",
                ms(result.copy.per_turn, 3),
            ]
            for result in results
        ],
    )
    out += ["", "Wall time of the same turns, median ms:", ""]
    out += table(
        ["database", *SIDES],
        [[result.database, *(ms(result.side(side, wall=True), 2) for side in SIDES)] for result in results],
    )
    verdicts = [
        [
            f"{result.database}: (ours long + its copy share - peer's growth) / ours fresh",
            times(result.ratio),
            f"±{result.spread:.2f}",
            f"at most {LIMIT}x, rounds within ±{SPREAD}",
            "**PASS**" if result.passed else "**FAIL**",
        ]
        for result in results
    ]
    return [*out, "", *table(["target", "ratio", "spread", "limit", "verdict"], verdicts)]


def main() -> int:
    command = parser("bench.history", __doc__, strict=True)
    command.add_argument("--rounds", type=int, help="measured rounds (default 5)")
    command.add_argument("--messages", type=int, help="the long thread's size (default 1000)")
    command.add_argument(
        "--keep-gc", action="store_true", help="leave the garbage collector on during the timed turns"
    )
    arguments = command.parse_args()
    settings = QUICK if arguments.quick else FULL
    if arguments.rounds:
        settings = dataclasses.replace(settings, rounds=arguments.rounds)
    if arguments.messages:
        settings = dataclasses.replace(settings, messages=arguments.messages)
    pin_this_process(SERVER_CORE)
    clock, notes = Clock(), list[str]()
    with folder("history", keep=arguments.keep_logs) as logs:
        results, version = asyncio.run(run(arguments, settings, notes, logs))
    method = (
        f"Settings: {settings.warmup} warm-up + {settings.rounds} rounds of {settings.per_round} quadruples "
        f"(a turn of each side, the order rotating); this process pinned to core {SERVER_CORE}; "
        + (
            "the collector on during turns"
            if arguments.keep_gc
            else "heap collected and frozen (`gc.freeze`) at each round's start, collected before each turn, the collector off during it"
        )
    )
    lines = environment(
        command_line("bench.history", sys.argv[1:]),
        postgres=version,
        packages=PACKAGES,
        notes=[method, *notes, clock.line(), f"cores: {os.cpu_count()}"],
    )
    publish(arguments, {"history": "\n".join(render(results, lines))}, full=not arguments.quick)
    return 1 if arguments.strict and not all(result.passed for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
