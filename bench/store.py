"""Our `SqlConversationStore` against floors and rival stores measured in the same run.

The workloads are in `bench.store_workloads`, the floors in `bench.store_systems` and the rivals in
`bench.store_rivals`; how a turn's cost grows with its history is measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from bench.harness.databases import Dialect, available
from bench.harness.options import parser, publish
from bench.harness.reports import PACKAGES, Clock, command_line, environment
from bench.harness.servers import folder
from bench.harness.stats import median
from bench.store_messages import history
from bench.store_report import GROWTH_SIZES, Section, checks, render
from bench.store_rivals import open_langgraph, open_openai_agents
from bench.store_systems import Ours, PydanticStoreBackend, aiosqlite_floor, asyncpg_floor, sqlite_floor
from bench.store_workloads import Contender, Places, Results, Settings, System, run_concurrent, run_per_size

FULL = Settings()
QUICK = Settings(warmup=1, repeats=3, turns=4, concurrent_runs=1)
WARM_CACHE_BYTES = 1 << 30
"""The history cache of `warm`: room for every history of a full run (~75 MB charged at 22 rounds)."""
RIVALS = ("openai-agents", "langgraph-checkpoint-sqlite", "langchain-core")


def contenders(ours: Ours, dialect: Dialect) -> list[Contender]:
    """Every system measured on `dialect`, in this order: ours first, as the SQLite floors copy its journal
    settings. Ours twice: `ours` with no history cache, judged (the floors' work); `warm` with every
    history cached, reported (`docs/benchmarks.md`, the store's method)."""

    async def memory(url: str) -> System:
        return PydanticStoreBackend.in_memory()

    sqlite = dialect == "SQLite"

    def floor(encode: bool) -> Callable[[str], Awaitable[System]]:
        if sqlite:
            return lambda url: sqlite_floor(url, encode=encode, pragmas=ours.pragmas)
        return lambda url: asyncpg_floor(url, encode=encode)

    every: list[tuple[str, Callable[[str], Awaitable[System]], bool]] = [
        ("ours", lambda url: ours.open(url, history_cache_bytes=0, label=", no history cache"), True),
        (
            "warm",
            lambda url: ours.open(url, history_cache_bytes=WARM_CACHE_BYTES, label=", history cached"),
            True,
        ),
        ("floor", floor(encode=False), True),
        ("fair", floor(encode=True), True),
        ("async", lambda url: aiosqlite_floor(url, pragmas=ours.pragmas), sqlite),
        ("memory", memory, sqlite),
        ("openai", open_openai_agents, True),
        ("langgraph", open_langgraph, sqlite),
    ]
    return [Contender(key, open_) for key, open_, measured in every if measured]


def _answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("Your order ORD-5678 ships tomorrow.")])


async def history_growth(ours: Ours, url: str, rounds: int) -> dict[str, dict[int, float]]:
    """Median ms of one turn at each of `GROWTH_SIZES` messages: the unpersisted baseline and ours,
    alternating turn by turn (`docs/benchmarks.md`, the store's method, says how and why)."""
    agent = Agent(FunctionModel(_answer))
    system = await ours.open(url)
    store = system.store
    timings: dict[str, dict[int, list[float]]] = {"baseline": {}, "ours": {}, "store": {}, "added": {}}
    try:
        for size in GROWTH_SIZES:
            conversation_id = f"growth-{size}"
            await store.save(Conversation(conversation_id=conversation_id, messages=history(size)))
            messages: list[ModelMessage] = []
            for turn in range(rounds + 1):  # the first round warms up
                # Each side starts from a collected heap: a collection the other left due lands in neither.
                gc.collect()
                started = time.perf_counter()
                await agent.run("Where is ORD-5678?", conversation=Conversation(messages=list(messages)))
                baseline = time.perf_counter() - started
                gc.collect()
                started = time.perf_counter()
                conversation = await store.load(conversation_id)
                assert conversation is not None
                loaded = time.perf_counter()
                messages = list(conversation.messages)
                result = await agent.run("Where is ORD-5678?", conversation=conversation)
                ran = time.perf_counter()
                await store.save(result)
                persisted = time.perf_counter() - started
                # Back to `size` messages for the next round (a regenerate, as a user would).
                await store.branch(conversation_id, at=size, expected_revision=result.conversation.revision)
                if turn:
                    measured = {"baseline": baseline, "ours": persisted, "store": persisted - (ran - loaded)}
                    # Paired: both turns of a round ran seconds apart, on a core of the same speed.
                    measured["added"] = persisted - baseline
                    for name, value in measured.items():
                        timings[name].setdefault(size, []).append(value)
    finally:
        await system.aclose()
    return {
        name: {size: median(values) * 1000 for size, values in by_size.items()}
        for name, by_size in timings.items()
    }


async def run(
    arguments: argparse.Namespace, notes: list[str], logs: Path
) -> tuple[list[Section], str | None]:
    settings = QUICK if arguments.quick else FULL
    ours = Ours()
    databases, version = await available(arguments.postgres, notes)
    sections: list[Section] = []
    for dialect in databases:
        async with AsyncExitStack() as stack:
            places = Places(dialect, logs, arguments.postgres, stack)
            rounds = 10 if arguments.quick else 40
            print(f"{dialect}: history growth, {rounds} turns at {GROWTH_SIZES} messages", flush=True)
            growth = await history_growth(ours, await places.new("growth"), rounds)
            results = Results()
            sizes = ", ".join(f"{size:,}" for size in settings.sizes)
            print(f"{dialect}: one turn at {sizes} messages", flush=True)
            await run_per_size(contenders(ours, dialect), places, settings, results)
            print(
                f"{dialect}: {settings.conversations} conversations x {settings.turns} turns, all at once",
                flush=True,
            )
            await run_concurrent(contenders(ours, dialect), places, settings, results)
            pragmas = dict(ours.pragmas) if dialect == "SQLite" else None
            sections.append(Section(dialect, results, pragmas, growth))
    return sections, version


def main() -> int:
    options = parser("bench.store", __doc__, strict=True)
    arguments = options.parse_args()
    settings = QUICK if arguments.quick else FULL
    clock, notes = Clock(), list[str]()
    with folder("store", keep=arguments.keep_logs) as logs:
        sections, version = asyncio.run(run(arguments, notes, logs))
    rounds = (
        f"Settings: {settings.warmup} warm-up + {settings.repeats} measured turns per size and system, "
        f"{settings.concurrent_runs} concurrent run(s)"
    )
    command = command_line("bench.store", sys.argv[1:])
    lines = environment(
        command, postgres=version, packages=(*PACKAGES, *RIVALS), notes=[rounds, *notes, clock.line()]
    )
    text = "\n".join(render(sections, settings, lines))
    publish(arguments, {"store": text}, full=not arguments.quick)
    failed = [check for section in sections for check in checks(section) if check.verdict == "FAIL"]
    return 1 if failed and arguments.strict else 0


if __name__ == "__main__":
    sys.exit(main())
