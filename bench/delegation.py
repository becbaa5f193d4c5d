"""What durability costs a delegated turn: a router whose tool delegates to a sub-agent with one tool,
driven by `run_step` (streamed, checkpointed, its sub-run stored), against the same delegation run by
pydantic-ai alone (`agent.run` inside the tool) with nothing stored, side by side in rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import AgentStreamEvent, ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from agent import ChatApp, RunScope, Runtime, RuntimeOptions, open_runtime, queue_run, run_step
from bench.harness.databases import Dialect, available, scratch_database
from bench.harness.options import parser, publish
from bench.harness.reports import Clock, command_line, environment, section, table
from bench.harness.servers import folder
from bench.harness.stats import median, ms, paired_ratio, times

TARGET = 1.3
PROMPT = "Where is ORD-5678?"
Turn = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Settings:
    warmup: int = 3
    repeats: int = 30


FULL, QUICK = Settings(), Settings(warmup=1, repeats=3)


def _scripted(first: tuple[str, dict[str, Any]], answer: str) -> FunctionModel:
    """Calls `first`, then answers `answer` word by word once the call's result is in."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
            for word in answer.split(" "):
                yield word + " "
            return
        name, args = first
        yield {0: DeltaToolCall(name=name, json_args=json.dumps(args), tool_call_id=f"{name}_1")}

    return FunctionModel(stream_function=stream, model_name="bench-delegation")


async def _drain(ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
    async for _ in events:
        pass


def agents() -> tuple[Agent[Any, str], Agent[Any, str]]:
    """The router and its sub-agent; the router's tool delegates durably when its deps is a `RunScope`."""
    orders = Agent(
        _scripted(("lookup_order", {"order_id": "ORD-5678"}), "ORD-5678 shipped, tracking TRK-111."),
        name="orders",
    )
    router = Agent(
        _scripted(("ask_orders", {"task": PROMPT}), "Orders says ORD-5678 shipped, tracking TRK-111."),
        name="router",
    )

    @orders.tool_plain
    def lookup_order(order_id: str) -> dict[str, str]:  # pyright: ignore[reportUnusedFunction]
        """Look an order up."""
        return {"order_id": order_id, "status": "shipped", "tracking": "TRK-111"}

    @router.tool
    async def ask_orders(ctx: RunContext[Any], task: str) -> str:  # pyright: ignore[reportUnusedFunction]
        """Ask the orders agent."""
        if isinstance(ctx.deps, RunScope):
            return await ctx.deps.delegate(ctx, orders, task, deps=ctx.deps)
        result = await orders.run(task, deps=ctx.deps, usage=ctx.usage, event_stream_handler=_drain)
        return result.output

    return router, orders


@dataclass
class Bench:
    runtime: Runtime
    router: Agent[Any, str]

    async def ours(self) -> Turn:
        db = self.runtime.db
        thread = await db.threads.create(user_id="bench", title="bench")
        opened = await queue_run(self.runtime, thread.thread_id, "message", content=PROMPT, claim=True)

        async def turn() -> None:
            status = await run_step(self.runtime, opened.run.run_id, claimed=opened.claimed, span=opened.span)
            if status != "completed":
                raise RuntimeError(f"the delegated turn ended {status!r}")

        return turn

    async def bare(self) -> Turn:
        async def turn() -> None:
            result = await self.router.run(PROMPT, deps=None, event_stream_handler=_drain)
            if "TRK-111" not in result.output:
                raise RuntimeError(f"the bare turn answered {result.output!r}")

        return turn


async def measure(bench: Bench, settings: Settings, title: str) -> tuple[float, float, float]:
    """Median ours, median bare and the median of each round's ratio, the sides' order alternating."""
    sides = {"ours": bench.ours, "bare": bench.bare}
    samples: dict[str, dict[int, float]] = {"ours": {}, "bare": {}}
    rounds = settings.warmup + settings.repeats
    for number in range(rounds):
        for side in ["ours", "bare"] if number % 2 == 0 else ["bare", "ours"]:
            turn = await sides[side]()
            gc.collect()
            started = time.perf_counter()
            await turn()
            if number >= settings.warmup:
                samples[side][number] = time.perf_counter() - started
        print(f"\r{title}: round {number + 1}/{rounds}", end="", flush=True)
    print(flush=True)
    ours, bare = samples["ours"], samples["bare"]
    return median(ours.values()), median(bare.values()), paired_ratio(ours, bare)


async def run(
    arguments: argparse.Namespace, settings: Settings, notes: list[str], logs: Path
) -> tuple[list[list[str]], str | None]:
    databases, version = await available(arguments.postgres, notes, quick=arguments.quick)
    rows: list[list[str]] = []
    for database in databases:
        rows.append(await run_dialect(database, arguments, settings, logs))
    return rows, version


async def run_dialect(
    database: Dialect, arguments: argparse.Namespace, settings: Settings, logs: Path
) -> list[str]:
    router, _ = agents()
    async with AsyncExitStack() as stack:
        url = await stack.enter_async_context(
            scratch_database(database, logs, "delegation", arguments.postgres)
        )
        app = ChatApp(agent=router, deps=lambda scope: scope, read_only_tools={"lookup_order"})
        options = RuntimeOptions(messages_per_minute=None)
        runtime = await stack.enter_async_context(open_runtime(app, url, options=options))
        ours, bare, ratio = await measure(Bench(runtime, router), settings, database)
    verdict = "meets" if ratio <= TARGET else "misses"
    return [database, ms(ours), ms(bare), times(ratio), f"{verdict} ≤ {TARGET}x"]


def main() -> int:
    arguments = parser("bench.delegation", __doc__, strict=True).parse_args()
    settings = QUICK if arguments.quick else FULL
    clock, notes = Clock(), list[str]()
    with folder("delegation", keep=arguments.keep_logs) as logs:
        rows, version = asyncio.run(run(arguments, settings, notes, logs))
    lines = environment(
        command_line("bench.delegation", sys.argv[1:]),
        postgres=version,
        notes=[
            f"Settings: {settings.warmup} warm-up + {settings.repeats} measured rounds",
            *notes,
            clock.line(),
        ],
    )
    text = section(lines) + table(
        "database | durable-chat (ms) | pydantic-ai alone (ms) | ratio | target", rows, "_rrr"
    )
    publish(arguments, {"delegation": "\n".join(text)}, full=not arguments.quick)
    passed = all(row[-1].startswith("meets") for row in rows)
    return 1 if arguments.strict and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
