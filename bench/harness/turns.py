"""Turns prepared to be timed: ours through the step; the same agent driven as `agent.step` drives it
with nothing stored or logged (`run_bare`), with pydantic-ai-harness's `StepPersistence` when installed
(`Harness`); rounds of sides.

Preparing a turn (its thread, its queued run) is not timed; calling the prepared `Turn` runs it and
nothing else.
"""

from __future__ import annotations

import gc
import importlib
import sqlite3
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import (
    AgentStreamEvent,
    FunctionToolResultEvent,
    ModelMessage,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    UserContent,
)
from pydantic_core import to_jsonable_python
from pydantic_graph import End
from sqlalchemy.ext.asyncio import AsyncEngine

from agent import (
    ChatApp,
    GuardrailContext,
    Opened,
    RunHooks,
    RunRecords,
    RunScope,
    Runtime,
    RuntimeOptions,
    ToolLedger,
    ToolSchemas,
    first_tripped,
    open_runtime,
    queue_run,
    run_step,
)
from store import Ledger
from stream import (
    RunFinished,
    RunStarted,
    StreamEvent,
    TextDelta,
    TextDone,
    ToolCall,
    ToolResult,
    UserMessage,
)

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
    queue_in_turn: bool = False,
    **queue: Any,
) -> Turn:
    """A turn of `thread_id` (a new thread if `None`), queued and claimed as the server's POST does (within
    the turn if `queue_in_turn`); calling it runs the step, which must end `expect`."""
    if thread_id is None:
        thread_id = (await runtime.db.threads.create(user_id="bench", title="bench")).thread_id

    async def opened() -> Opened:
        return await queue_run(runtime, thread_id, "message", content=content, claim=True, **queue)

    ready = None if queue_in_turn else await opened()

    async def turn() -> None:
        run = ready if ready is not None else await opened()
        assert run.claimed is not None
        if (status := await run_step(runtime, run.run.run_id, claimed=run.claimed, span=run.span)) != expect:
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


INSTALL = "pip install --no-deps pydantic-ai-harness"


def bare_turn(
    runtime: Runtime,
    messages: Sequence[ModelMessage] = (),
    extra: Sequence[AbstractCapability[Any]] = (),
    files: Sequence[UserContent] = (),
) -> Turn:
    """`PROMPT` by `run_bare` on `messages` in memory, prepared (its scope and conversation made now); its
    answer must name the order."""
    scope = bare_scope(runtime.db.ledger, runtime.db.engine)
    conversation = Conversation(messages=list(messages))

    async def turn() -> None:
        output = await run_bare(runtime, scope, PROMPT, conversation, extra, files)
        if "ORD-5678" not in output:
            raise RuntimeError(f"the turn with nothing stored answered {output!r}")

    return turn


async def run_bare(
    runtime: Runtime,
    scope: RunScope,
    prompt: str,
    conversation: Conversation,
    extra: Sequence[AbstractCapability[Any]] = (),
    files: Sequence[UserContent] = (),
) -> str:
    """Run one turn of `conversation` in memory and return its output; events are built and dropped.

    `extra` capabilities join the runtime's: another library's persistence, measured on the same turn.
    `files`: what the message attaches, held in memory (`BinaryContent`), given to the model with it.
    """
    app, guardrails = runtime.app, runtime.guardrails
    agent = app.agent
    run_id = scope.run_id
    events: list[StreamEvent] = [
        RunStarted(run_id=run_id, kind="message"),
        UserMessage(run_id=run_id, content=prompt),
    ]
    context = GuardrailContext(runtime.db, scope.thread_id, run_id, scope.user_id)
    if await first_tripped(guardrails.input, prompt, context) is not None:
        raise RuntimeError(f"an input guardrail blocked the baseline turn: {prompt!r}")
    responses = 0
    async with (
        app.deps_for(scope) as deps,
        agent.iter(
            [prompt, *files] if files else prompt,
            model=runtime.model,
            conversation=conversation,
            deps=deps,
            usage_limits=app.usage_limits,
            capabilities=[
                RunHooks(app.model_retries, runtime.tool_failures, ToolSchemas()),
                *runtime.agent_tracing(),
                *extra,
            ],
        ) as agent_run,
    ):
        async for node in agent_run:
            if agent.is_model_request_node(node):
                responses += 1
                async with node.stream(agent_run.ctx) as stream:
                    async for event in stream:
                        found = _model_event(run_id, f"{run_id[:8]}.1.{responses}", event)
                        if isinstance(found, TextDone) and await first_tripped(
                            guardrails.output, found.text, context
                        ):
                            raise RuntimeError(f"an output guardrail tripped on {found.text!r}")
                        if found is not None:
                            events.append(found)
            elif agent.is_call_tools_node(node):
                async with node.stream(agent_run.ctx) as stream:
                    async for event in stream:
                        if isinstance(event, FunctionToolResultEvent):
                            events.append(_tool_result(run_id, event))
            elif isinstance(node, End):
                break
        result = agent_run.result
        assert result is not None, "the run ended without a result"
    output = result.output
    if not isinstance(output, str):
        raise RuntimeError(f"the baseline turn paused for approval: {prompt!r}")
    events.append(RunFinished(run_id=run_id, status="completed", output=output))
    return output


def _model_event(run_id: str, prefix: str, event: object) -> StreamEvent | None:
    match event:
        case PartStartEvent(index=index, part=TextPart(content=content)) if content:
            return TextDelta(run_id=run_id, part_id=f"{prefix}.{index}", delta=content)
        case PartDeltaEvent(index=index, delta=TextPartDelta(content_delta=delta)) if delta:
            return TextDelta(run_id=run_id, part_id=f"{prefix}.{index}", delta=delta)
        case PartEndEvent(index=index, part=TextPart(content=content)):
            return TextDone(run_id=run_id, part_id=f"{prefix}.{index}", text=content)
        case PartEndEvent(part=ToolCallPart() as call):
            return ToolCall(
                run_id=run_id,
                tool_call_id=call.tool_call_id,
                tool_name=call.tool_name,
                args=call.args_as_dict(),
            )
        case _:
            return None


def _tool_result(run_id: str, event: FunctionToolResultEvent) -> ToolResult:
    part = event.part
    return ToolResult(
        run_id=run_id,
        tool_call_id=part.tool_call_id,
        tool_name=part.tool_name,
        outcome=part.outcome if part.outcome in ("success", "denied") else "failed",
        content=to_jsonable_python(part.content, fallback=str),
    )


def _step_persistence() -> ModuleType:
    return importlib.import_module("pydantic_ai_harness.step_persistence")


class Harness:
    """One `SqliteStepStore` on a long-lived connection, and a new `StepPersistence` on it for every turn.

    The connection has ours' journal settings (WAL, `synchronous=NORMAL`), as a server would keep one
    open: given a path instead, the store opens a connection per call, in WAL with SQLite's default
    `synchronous=FULL` (an fsync per commit), which made it 3-5 times slower here.
    """

    def __init__(self, folder: Path) -> None:
        persistence = _step_persistence()  # ImportError when not installed: before anything is opened
        # Its calls run on worker threads (anyio.to_thread): the connection must allow that.
        self.connection = sqlite3.connect(folder / "harness.db", check_same_thread=False)
        for pragma in ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA busy_timeout=30000"):
            self.connection.execute(pragma)
        self.store = persistence.SqliteStepStore(connection=self.connection)
        self.version = metadata.version("pydantic-ai-harness")

    @classmethod
    def open(cls, folder: Path) -> tuple[Harness | None, str | None]:
        """The harness, or `None` and why not."""
        try:
            return cls(folder), None
        except ImportError as error:
            return None, f"pydantic-ai-harness is not installed ({error.name}): `{INSTALL}` adds its column"

    def capability(self) -> AbstractCapability[Any]:
        # Defaults, as its README's quick start: a run id per `Agent.run`, events, snapshots, tool effects.
        return _step_persistence().StepPersistence(store=self.store)

    def close(self) -> None:
        self.connection.close()
