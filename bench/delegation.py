"""What durability costs a delegated turn: a router whose tool delegates to a sub-agent with one tool,
driven by `run_step` (streamed, checkpointed, its sub-run stored), against the same delegation run by
pydantic-ai alone (`agent.run` inside the tool) with nothing stored, side by side in rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from agent import ChatApp, RunScope
from bench.harness.databases import available
from bench.harness.options import parser, publish
from bench.harness.plain_app import answered
from bench.harness.reports import Clock, command_line, environment, section, table
from bench.harness.servers import folder
from bench.harness.stats import median, ms, paired_ratio, times
from bench.harness.turns import PROMPT, Turn, alternate, bench_runtime, drain, queued

TARGET = 1.3
WARMUP, REPEATS = 3, 30


def _scripted(first: tuple[str, dict[str, Any]], answer: str) -> FunctionModel:
    """Calls `first`, then answers `answer` word by word once the call's result is in."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        if answered(messages):
            for word in answer.split(" "):
                yield word + " "
            return
        name, args = first
        yield {0: DeltaToolCall(name=name, json_args=json.dumps(args), tool_call_id=f"{name}_1")}

    return FunctionModel(stream_function=stream, model_name="bench-delegation")


def router_agent() -> Agent[Any, str]:
    """The router, whose tool delegates to its sub-agent durably when its deps is a `RunScope`."""
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
        result = await orders.run(task, deps=ctx.deps, usage=ctx.usage, event_stream_handler=drain)
        return result.output

    return router


async def run(
    arguments: argparse.Namespace, warmup: int, repeats: int, notes: list[str], logs: Path
) -> tuple[list[list[str]], str | None]:
    """Per database: median ours, median bare, the median of each round's ratio, the sides alternating."""
    databases, version = await available(arguments.postgres, notes, quick=arguments.quick)
    router = router_agent()
    app = ChatApp(agent=router, deps=lambda scope: scope, read_only_tools={"lookup_order"})
    rows: list[list[str]] = []
    for database in databases:
        async with bench_runtime(app, database, logs, "delegation", arguments.postgres) as runtime:

            async def bare() -> Turn:
                async def turn() -> None:
                    result = await router.run(PROMPT, deps=None, event_stream_handler=drain)
                    if "TRK-111" not in result.output:
                        raise RuntimeError(f"the bare turn answered {result.output!r}")

                return turn

            sides = {"ours": lambda: queued(runtime), "bare": bare}
            samples = await alternate(sides, warmup, repeats, database)
        ours, theirs = samples["ours"], samples["bare"]
        ratio = paired_ratio(ours, theirs)
        verdict = f"{'meets' if ratio <= TARGET else 'misses'} ≤ {TARGET}x"
        rows.append([database, ms(median(ours.values())), ms(median(theirs.values())), times(ratio), verdict])
    return rows, version


def main() -> int:
    arguments = parser("bench.delegation", __doc__, strict=True).parse_args()
    warmup, repeats = (1, 3) if arguments.quick else (WARMUP, REPEATS)
    clock, notes = Clock(), list[str]()
    with folder("delegation", keep=arguments.keep_logs) as logs:
        rows, version = asyncio.run(run(arguments, warmup, repeats, notes, logs))
    lines = environment(
        command_line("bench.delegation", sys.argv[1:]),
        postgres=version,
        notes=[f"Settings: {warmup} warm-up + {repeats} measured rounds", *notes, clock.line()],
    )
    text = section(lines) + table(
        "database | durable-chat (ms) | pydantic-ai alone (ms) | ratio | target", rows, "_rrr"
    )
    publish(arguments, {"delegation": "\n".join(text)}, full=not arguments.quick)
    passed = all(row[-1].startswith("meets") for row in rows)
    return 1 if arguments.strict and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
