"""Our `SqlConversationStore` against floors and rival stores measured in the same run.

The workloads are in `bench.store_workloads`, the floors in `bench.store_systems` and the rivals in
`bench.store_rivals`; how a turn's cost grows with its history is measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from bench.harness.databases import Dialect, available
from bench.harness.options import parser, publish
from bench.harness.reports import PACKAGES, Clock, command_line, environment, table
from bench.harness.servers import folder
from bench.harness.stats import median
from bench.store_messages import history
from bench.store_report import Section, checks, render
from bench.store_rivals import open_langgraph, open_openai_agents
from bench.store_systems import AiosqliteFloor, AsyncpgFloor, Ours, PydanticStoreBackend, SqliteFloor, System
from bench.store_workloads import Contender, Places, Results, Settings, run_concurrent, run_per_size

FULL = Settings()
QUICK = Settings(warmup=1, repeats=3, turns=4, concurrent_runs=1)
GROWTH_SIZES = (10, 1_000)
GROWTH_LIMIT = 1.2
ASYNC_FLOOR_LIMIT = 1.5
WARM_CACHE_BYTES = 1 << 30
"""The history cache of `warm`: room for every history of a full run (~75 MB charged at 22 rounds)."""
RIVALS = ("openai-agents", "langgraph-checkpoint-sqlite", "langchain-core")


def our_contenders(ours: Ours) -> list[Contender]:
    """Ours twice: `ours` with no history cache, judged (the floors' work); `warm` with every history
    cached, reported (`docs/benchmarks.md`, the store's method)."""

    async def cold(url: str) -> System:
        return await ours.open(url, history_cache_bytes=0, label=", no history cache")

    async def warm(url: str) -> System:
        return await ours.open(url, history_cache_bytes=WARM_CACHE_BYTES, label=", history cached")

    return [Contender("ours", cold), Contender("warm", warm)]


def contenders(ours: Ours, dialect: Dialect) -> list[Contender]:
    """Every system measured on `dialect`; ours first, as the SQLite floors copy its journal settings."""
    if dialect == "PostgreSQL":
        return [
            *our_contenders(ours),
            Contender("floor", lambda url: AsyncpgFloor.open(url, encode=False)),
            Contender("fair", lambda url: AsyncpgFloor.open(url, encode=True)),
            Contender("openai", open_openai_agents),
        ]

    async def floor(url: str) -> System:
        return SqliteFloor(url, encode=False, pragmas=ours.pragmas)

    async def fair(url: str) -> System:
        return SqliteFloor(url, encode=True, pragmas=ours.pragmas)

    async def memory(url: str) -> System:
        return PydanticStoreBackend.in_memory()

    return [
        *our_contenders(ours),
        Contender("floor", floor),
        Contender("fair", fair),
        Contender("async", lambda url: AiosqliteFloor.open(url, pragmas=ours.pragmas)),
        Contender("memory", memory),
        Contender("openai", open_openai_agents),
        Contender("langgraph", open_langgraph),
    ]


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


def growth_lines(title: str, medians: dict[str, dict[int, float]]) -> tuple[list[str], float]:
    """The growth table of one database, and its flatness ratio (paired differences: see the store's method)."""
    small, large = GROWTH_SIZES
    base, added = medians["baseline"], medians["added"]
    rows = [
        [
            f"{size:,}",
            f"{base[size]:.2f}",
            f"{medians['ours'][size]:.2f}",
            f"{added[size]:.2f}",
            f"{medians['store'][size]:.2f}",
        ]
        for size in GROWTH_SIZES
    ]
    header = "messages | no persistence (baseline) | ours: load + run + save | ours - baseline (paired) | of which our load + save"
    lines = [
        f"{title}: one in-process turn (pydantic-ai `Agent` on a `FunctionModel`), median ms:",
        "",
        *table(header, rows),
        "",
    ]
    return lines, (base[small] + added[large]) / (base[small] + added[small])


def async_floor_checks(title: str, results: Results) -> list[list[str]]:
    """Target 5: load+save within 1.5x of the async floor (aiosqlite on SQLite, asyncpg on PostgreSQL),
    judged on `ours` (no history cache: the floor's work); `warm` (history cached) shown beside it."""
    floor = "async" if title == "SQLite" else "fair"
    rows: list[list[str]] = []
    for size in (10, 100):
        if math.isnan(ratio := results.ratio("ours", floor, size, "total")):
            continue
        verdict = "PASS" if ratio <= ASYNC_FLOOR_LIMIT else "FAIL"
        label = f"{title}: load+save at {size:,} messages, ours (no history cache) / async floor"
        rows.append([label, f"{ratio:.2f}x", f"at most {ASYNC_FLOOR_LIMIT:g}x", f"**{verdict}**"])
        if not math.isnan(warm := results.ratio("warm", floor, size, "total")):
            rows.append(
                [
                    f"{title}: the same, history cached (not judged: the floor caches nothing)",
                    f"{warm:.2f}x",
                    "",
                    "",
                ]
            )
    return rows


async def run(
    arguments: argparse.Namespace, notes: list[str], logs: Path
) -> tuple[list[Section], list[str], str | None]:
    settings = QUICK if arguments.quick else FULL
    ours = Ours()
    databases, version = await available(arguments.postgres, notes)
    sections: list[Section] = []
    growth: list[str] = []
    verdicts: list[list[str]] = []
    for dialect in databases:
        async with AsyncExitStack() as stack:
            places = Places(dialect, logs, arguments.postgres, stack)
            rounds = 10 if arguments.quick else 40
            print(f"{dialect}: history growth, {rounds} turns at {GROWTH_SIZES} messages", flush=True)
            table_lines, flatness = growth_lines(
                dialect, await history_growth(ours, await places.new("growth"), rounds)
            )
            growth += table_lines
            label = f"{dialect}: (ours at 1,000 - baseline growth 10 to 1,000) / ours at 10"
            verdicts.append(
                [
                    label,
                    f"{flatness:.2f}x",
                    f"at most {GROWTH_LIMIT:g}x",
                    f"**{'PASS' if flatness <= GROWTH_LIMIT else 'FAIL'}**",
                ]
            )
            results = Results()
            print(
                f"{dialect}: one turn at {', '.join(f'{s:,}' for s in settings.sizes)} messages", flush=True
            )
            await run_per_size(contenders(ours, dialect), places, settings, results)
            print(
                f"{dialect}: {settings.conversations} conversations x {settings.turns} turns, all at once",
                flush=True,
            )
            await run_concurrent(contenders(ours, dialect), places, settings, results)
            sections.append(Section(dialect, results, dict(ours.pragmas) if dialect == "SQLite" else None))
    for section in sections:
        verdicts += async_floor_checks(section.title, section.results)
    extra = [
        "",
        "### History growth and the async floor",
        "",
        *growth,
        *table("target | ratio | limit | verdict", verdicts),
    ]
    return sections, extra, version


def main() -> int:
    options = parser("bench.store", __doc__, strict=True)
    arguments = options.parse_args()
    settings = QUICK if arguments.quick else FULL
    clock, notes = Clock(), list[str]()
    with folder("store", keep=arguments.keep_logs) as logs:
        sections, extra, version = asyncio.run(run(arguments, notes, logs))
    rounds = (
        f"Settings: {settings.warmup} warm-up + {settings.repeats} measured turns per size and system, "
        f"{settings.concurrent_runs} concurrent run(s)"
    )
    command = command_line("bench.store", sys.argv[1:])
    lines = environment(
        command, postgres=version, packages=(*PACKAGES, *RIVALS), notes=[rounds, *notes, clock.line()]
    )
    text = "\n".join([*render(sections, settings, lines), *extra])
    publish(arguments, {"store": text}, full=not arguments.quick)
    failed = [check for section in sections for check in checks(section) if check.verdict == "FAIL"]
    return 1 if failed and arguments.strict else 0


if __name__ == "__main__":
    sys.exit(main())
