"""Turns prepared to be timed: ours through the step, the same agent with nothing stored, in rounds.

Preparing a turn (its thread, its queued run) is not timed; calling the prepared `Turn` runs it and
nothing else.
"""

from __future__ import annotations

import gc
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.messages import AgentStreamEvent
from sqlalchemy.ext.asyncio import AsyncEngine

from agent import (
    ChatApp,
    RunRecords,
    RunScope,
    Runtime,
    RuntimeOptions,
    ToolLedger,
    open_runtime,
    queue_run,
    run_step,
)
from store import Ledger

from .databases import Dialect, scratch_database
from .stats import rotated

PROMPT = "Where is ORD-5678?"
Turn = Callable[[], Awaitable[None]]


@asynccontextmanager
async def bench_runtime(
    app: ChatApp[Any], database: Dialect, logs: Path, name: str, postgres: str | None
) -> AsyncGenerator[Runtime]:
    """`app`'s runtime on a scratch database; no per-user message rate, as one user sends every turn."""
    async with (
        scratch_database(database, logs, name, postgres) as url,
        open_runtime(app, url, options=RuntimeOptions(messages_per_minute=None)) as runtime,
    ):
        yield runtime


async def queued(
    runtime: Runtime,
    thread_id: str | None = None,
    content: str = PROMPT,
    *,
    expect: str = "completed",
    **queue: Any,
) -> Turn:
    """A turn of `thread_id` (a new thread if `None`), queued and claimed as the server's POST does;
    calling it runs the step, which must end `expect`."""
    if thread_id is None:
        thread_id = (await runtime.db.threads.create(user_id="bench", title="bench")).thread_id
    opened = await queue_run(runtime, thread_id, "message", content=content, claim=True, **queue)
    assert opened.claimed is not None

    async def turn() -> None:
        if (
            status := await run_step(runtime, opened.run.run_id, claimed=opened.claimed, span=opened.span)
        ) != expect:
            raise RuntimeError(f"ours ended {status!r}, not {expect!r}")

    return turn


def bare_scope(ledger: Ledger, engine: AsyncEngine, user_id: str = "bench") -> RunScope:
    """A run's scope for a turn that stores nothing: a thread and run ids of its own, no records."""
    thread_id, run_id = str(uuid.uuid4()), str(uuid.uuid4())
    return RunScope(
        thread_id=thread_id,
        run_id=run_id,
        user_id=user_id,
        attempt=1,
        records=RunRecords(),
        ledger=ToolLedger(ledger, thread_id, run_id),
        engine=engine,
    )


async def drain(ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
    """An `event_stream_handler` that reads every event and keeps none, as a server storing nothing."""
    async for _ in events:
        pass


async def alternate(
    sides: Mapping[str, Callable[[], Awaitable[Turn]]], warmup: int, repeats: int, title: str
) -> dict[str, dict[int, float]]:
    """Rounds of one turn of every side, the order rotating round by round, the heap collected before
    each: each side's seconds by round, warm-ups dropped."""
    samples: dict[str, dict[int, float]] = {side: {} for side in sides}
    for number in range(warmup + repeats):
        for side in rotated(list(sides), number):
            turn = await sides[side]()
            gc.collect()
            started = time.perf_counter()
            await turn()
            if number >= warmup:
                samples[side][number] = time.perf_counter() - started
        print(f"\r{title}: round {number + 1}/{warmup + repeats}", end="", flush=True)
    print(flush=True)
    return samples
