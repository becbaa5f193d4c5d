"""Cancelling a run, in process, on SQLite and PostgreSQL: what is kept, and the fenced driver.

A scripted model streams a few words, then waits for the test: the run is cancelled there, from
another `Database` (another process's view, as a cancel arriving at another worker). Then the
test lets the driver go on: it must store nothing more.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import TypeVar

import pytest
from inline_snapshot import snapshot
from pydantic_ai import Agent, DeferredToolRequests, RunContext, Tool
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from agent import Attachment, Runtime, RuntimeOptions, attachments_in, cancel, interrupted_messages, run_step
from agent.demo import INSTRUCTIONS, TOOLS, ShopDeps
from store import LeaseLost, NewEvent, NewFile, NewRun, NoActiveRun, Run, Thread
from stream import RunFinished, RunStarted, TextDelta, ToolCall, ToolResult, event_from_data

from .step_app import App, AppFactory, shapes

pytestmark = pytest.mark.anyio

T = TypeVar("T")
DEADLINE = 30.0


class Held:
    """A model that streams `words`, optionally calls tools, then waits until `release` before finishing."""

    def __init__(self, words: list[str], *, calls: list[tuple[str, dict[str, object]]] | None = None) -> None:
        self.words = words
        self.calls = calls
        self.streamed = asyncio.Event()
        self.released = asyncio.Event()
        self.requests: list[list[ModelMessage]] = []

    def model(self) -> FunctionModel:
        return FunctionModel(stream_function=self._stream, model_name="held")

    async def _stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        self.requests.append(list(messages))
        if len(self.requests) > 1 and self.calls is not None:
            yield "Done."  # after the tools: a short reply
            return
        for word in self.words:
            yield word
        if self.calls is not None:
            for number, (name, args) in enumerate(self.calls):
                yield {
                    number: DeltaToolCall(name=name, json_args=json.dumps(args), tool_call_id=f"c{number}")
                }
            return
        self.streamed.set()
        await self.released.wait()
        yield " and the rest."


def _runtime(app: App, model: FunctionModel, *tools: Tool[ShopDeps]) -> Runtime:
    """`app`'s runtime serving the shop with `model` (and `tools` besides the shop's)."""
    return Runtime.of(replace(app.runtime.app, agent=_agent(model, *tools)), app.db, options=RuntimeOptions())


def _agent(model: FunctionModel, *tools: Tool[ShopDeps]) -> Agent[ShopDeps, str | DeferredToolRequests]:
    return Agent(
        model,
        deps_type=ShopDeps,
        output_type=[str, DeferredToolRequests],
        instructions=INSTRUCTIONS,
        tools=[*TOOLS, *tools],
        name="support",
    )


async def _eventually(check: Callable[[], Awaitable[T | None]]) -> T:
    async with asyncio.timeout(DEADLINE):
        while True:
            value = await check()
            if value is not None:
                return value
            await asyncio.sleep(0.02)


async def _stored(app: App, thread: Thread, predicate: Callable[[object], bool]) -> bool | None:
    events = [event_from_data(e.type, e.data) for e in await app.db.events.read(thread.thread_id)]
    return True if any(predicate(event) for event in events) else None


@pytest.fixture
async def two(app_factory: AppFactory) -> tuple[App, App]:
    """Two processes' views of one database: the first drives runs, the second cancels them."""
    return await app_factory(), await app_factory()


async def test_a_streaming_run_is_cancelled_from_another_process_and_its_driver_stores_nothing_more(
    two: tuple[App, App],
) -> None:
    driver, canceller = two
    held = Held(["Let ", "me ", "think ", "about ", "that"])
    runtime = _runtime(driver, held.model())
    thread = await driver.thread()
    run = (
        await driver.db.runs.queue(
            NewRun(thread_id=thread.thread_id, kind="message", content="Tell me a story")
        )
    ).run
    task = asyncio.create_task(run_step(runtime, run.run_id))
    await asyncio.wait_for(held.streamed.wait(), DEADLINE)
    # The streamed words reach the log (a background write, a quarter of a second later).
    await _eventually(
        lambda: _stored(driver, thread, lambda e: isinstance(e, TextDelta) and e.delta == "that")
    )

    cancelled = await cancel(canceller.db, thread.thread_id)

    assert cancelled.run_id == run.run_id
    assert cancelled.kept_text == "Let me think about that"
    finished = cancelled.event.event
    assert isinstance(finished, RunFinished)
    assert (finished.status, finished.output) == ("cancelled", "Let me think about that")
    assert (await canceller.db.runs.get(run.run_id)).status == "cancelled"
    after = await canceller.db.threads.get(thread.thread_id)
    assert after.status == "idle"
    assert after.checkpoint_event_id == cancelled.event.event_id
    messages = await canceller.messages(thread)
    assert shapes(messages) == snapshot(["request: user-prompt", "response: text"])
    [request, response] = messages
    assert isinstance(request, ModelRequest)
    assert isinstance(response, ModelResponse)
    assert response.state == "interrupted"
    assert response.parts == [TextPart("Let me think about that")]

    # The driver goes on and tries to store the rest: fenced, it stops and writes nothing.
    log = await canceller.db.events.read(thread.thread_id)
    held.released.set()
    assert await asyncio.wait_for(task, DEADLINE) == "cancelled"
    assert await canceller.db.events.read(thread.thread_id) == log
    assert log[-1].event_id == cancelled.event.event_id
    # Its event writes are fenced too, not only its checkpoints.
    owner = driver.db.runs.worker.worker_id
    late = [
        (
            log[-2].event_id + 1,  # the next id of the driver's reserved block
            NewEvent(run.run_id, "text_delta", b'{"run_id":"x","part_id":"p","delta":"late"}'),
        )
    ]
    with pytest.raises(LeaseLost):
        await driver.db.events.insert(thread.thread_id, late, run_id=run.run_id, worker_id=owner)
    assert await canceller.db.events.read(thread.thread_id) == log
    assert (await canceller.db.runs.get(run.run_id)).status == "cancelled"
    assert await canceller.messages(thread) == messages

    # The thread is usable at once, and the next turn sees the interrupted reply.
    followup = _runtime(canceller, FunctionModel(stream_function=_echo_history))
    next_run = (
        await canceller.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Go on"))
    ).run
    assert await run_step(followup, next_run.run_id) == "completed"
    assert shapes(await canceller.messages(thread)) == snapshot(
        ["request: user-prompt", "response: text", "request: user-prompt", "response: text"]
    )
    last = (await canceller.messages(thread))[-1]
    assert isinstance(last, ModelResponse)
    assert last.text == "I saw: Tell me a story | Let me think about that | Go on"


async def _echo_history(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    seen: list[str] = []
    for message in messages:
        for part in message.parts:
            content = getattr(part, "content", None)
            if part.part_kind in ("user-prompt", "text") and isinstance(content, str):
                seen.append(content)
    yield "I saw: " + " | ".join(seen)


async def test_a_run_cancelled_while_a_tool_runs_keeps_no_result_nobody_saw(two: tuple[App, App]) -> None:
    # A step's results are published with the checkpoint that stores them, once all its tools
    # answered: the lookup's, finished while the report hangs, was never shown, and is not kept.
    # The calls are: the report running past `SLOW_TOOL`, the response calling both was stored
    # (and its calls shown) before the cancel.
    driver, canceller = two
    started, release = asyncio.Event(), asyncio.Event()

    async def slow_report(ctx: RunContext[ShopDeps], topic: str) -> str:
        """Write a report on a topic (slowly)."""
        started.set()
        await release.wait()
        return f"report on {topic}"

    held = Held([], calls=[("lookup_order", {"order_id": "ORD-5678"}), ("slow_report", {"topic": "x"})])
    runtime = _runtime(driver, held.model(), Tool(slow_report))
    thread = await driver.thread()
    run = (
        await driver.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Look it up"))
    ).run
    task = asyncio.create_task(run_step(runtime, run.run_id))
    await asyncio.wait_for(started.wait(), DEADLINE)
    await _eventually(lambda: _stored_calls(canceller, thread))

    cancelled = await cancel(canceller.db, thread.thread_id)

    assert cancelled.kept_text is None
    messages = await canceller.messages(thread)
    assert shapes(messages) == snapshot(
        [
            "request: user-prompt",
            "response: tool-call(lookup_order), tool-call(slow_report)",
            "request: tool-return(lookup_order), tool-return(slow_report)",
            "response: ",
        ]
    )
    returns, stopped = messages[-2:]
    assert isinstance(stopped, ModelResponse)
    assert (stopped.parts, stopped.state) == ([], "interrupted")
    assert isinstance(returns, ModelRequest)
    lookup, report = returns.parts
    assert isinstance(lookup, ToolReturnPart)
    assert isinstance(report, ToolReturnPart)
    assert (lookup.outcome, report.outcome) == ("interrupted", "interrupted")

    log = await canceller.db.events.read(thread.thread_id)
    assert not any(event.type == "tool_result" for event in log)
    release.set()
    await asyncio.wait_for(task, DEADLINE)
    assert await canceller.db.events.read(thread.thread_id) == log


async def _stored_calls(app: App, thread: Thread) -> bool | None:
    return any(isinstance(m, ModelResponse) and m.tool_calls for m in await app.messages(thread)) or None


async def test_a_tool_cut_short_before_its_call_was_stored_leaves_no_call_shown(
    two: tuple[App, App], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Cancelled before the response calling it was stored (the tool's first `SLOW_TOOL`): no client
    # saw its call (a call is shown by the checkpoint that stores it), and the conversation keeps none.
    driver, canceller = two
    started, release = asyncio.Event(), asyncio.Event()

    async def slow_report(ctx: RunContext[ShopDeps], topic: str) -> str:
        """Write a report on a topic (slowly)."""
        started.set()
        await release.wait()
        return f"report on {topic}"

    held = Held([], calls=[("slow_report", {"topic": "x"})])
    runtime = _runtime(driver, held.model(), Tool(slow_report))
    thread = await driver.thread()
    run = (
        await driver.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Report"))
    ).run
    monkeypatch.setattr("agent.checkpointing.SLOW_TOOL", 3600.0)  # the cancel surely lands first
    task = asyncio.create_task(run_step(runtime, run.run_id))
    await asyncio.wait_for(started.wait(), DEADLINE)
    await cancel(canceller.db, thread.thread_id)
    release.set()
    await asyncio.wait_for(task, DEADLINE)

    assert shapes(await canceller.messages(thread)) == snapshot(["request: user-prompt", "response: "])
    log = await canceller.db.events.read(thread.thread_id)
    assert not any(event.type in ("tool_call", "tool_result") for event in log)


async def test_a_queued_run_is_cancelled_and_its_message_kept(app: App) -> None:
    thread = await app.thread()
    run = (await app.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Hello?"))).run

    cancelled = await cancel(app.db, thread.thread_id)

    assert cancelled.run_id == run.run_id
    messages = await app.messages(thread)
    assert shapes(messages) == snapshot(["request: user-prompt", "response: "])
    # A response closes the turn even with no words, so the next prompt is a request of its own.
    assert isinstance(messages[1], ModelResponse)
    assert (messages[1].parts, messages[1].state) == ([], "interrupted")
    # Nobody drives it any more: a worker that tries finds it ended.
    assert await run_step(app.runtime, run.run_id) == "cancelled"
    with pytest.raises(NoActiveRun):
        await cancel(app.db, thread.thread_id)
    # The next turn starts its own request: the stopped one stays as stored (no history rewritten).
    await app.send(thread, "Where is my order ORD-9012?")
    after = await app.messages(thread)
    assert after[:2] == messages
    assert shapes(after) == snapshot(
        [
            "request: user-prompt",
            "response: ",
            "request: user-prompt",
            "response: tool-call(lookup_order)",
            "request: tool-return(lookup_order)",
            "response: text",
        ]
    )


async def test_a_run_cancelled_before_its_first_checkpoint_keeps_its_attachments(app: App) -> None:
    thread = await app.thread()
    data = b"order,amount\nA-1,24.95\n"
    stored = await app.db.files.save(
        NewFile(
            thread_id=thread.thread_id,
            user_id=thread.user_id,
            name="orders.csv",
            media_type="text/csv",
            source=io.BytesIO(data),
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
        )
    )
    new = NewRun(thread_id=thread.thread_id, kind="message", content="Read this", file_ids=[stored.file_id])
    await app.db.runs.queue(new)

    await cancel(app.db, thread.thread_id)

    messages = await app.messages(thread)
    assert shapes(messages) == snapshot(["request: user-prompt", "response: "])
    assert isinstance(messages[0], ModelRequest)
    [prompt] = messages[0].parts
    assert isinstance(prompt, UserPromptPart)
    assert attachments_in(messages) == [
        Attachment(file_id=stored.file_id, name="orders.csv", media_type="text/csv", size=len(data))
    ]
    assert not isinstance(prompt.content, str)
    assert prompt.content[0] == "Read this"


async def test_no_active_run_and_a_paused_thread_have_nothing_to_cancel(app: App) -> None:
    thread = await app.thread()
    with pytest.raises(NoActiveRun) as raised:
        await cancel(app.db, thread.thread_id)
    assert raised.value.code == "no_active_run"
    await app.send(thread, "Please refund ORD-5678")
    assert (await app.db.threads.get(thread.thread_id)).status == "awaiting_approval"
    with pytest.raises(NoActiveRun):
        await cancel(app.db, thread.thread_id)


def _run(**changes: object) -> Run:
    base = Run(
        run_id="r" * 8,
        thread_id="t",
        kind="message",
        status="running",
        content="Hi",
        idempotency_key=None,
        error=None,
        attempt=1,
        checkpoints=0,
        created_at=None,  # pyright: ignore[reportArgumentType]
        started_at=None,
        finished_at=None,
    )
    return replace(base, **changes)  # pyright: ignore[reportArgumentType]


def test_only_the_latest_attempts_text_is_kept_and_a_withdrawn_part_keeps_its_replacement() -> None:
    from stream import TextDone, TextWithdrawn

    events = [
        RunStarted(run_id="r", kind="message"),
        TextDelta(run_id="r", part_id="a", delta="first attempt"),
        RunStarted(run_id="r", kind="recover"),
        TextDelta(run_id="r", part_id="b", delta="Hel"),
        TextDelta(run_id="r", part_id="b", delta="lo"),
        TextDone(run_id="r", part_id="b", text="Hello"),
        TextDelta(run_id="r", part_id="c", delta="api_secret=1"),
        TextWithdrawn(run_id="r", part_id="c", replacement="[withdrawn]"),
    ]
    messages, kept = interrupted_messages([], _run(attempt=2), events)
    assert kept == "Hello\n\n[withdrawn]"
    assert shapes(messages) == ["request: user-prompt", "response: text, text"]


def test_read_only_calls_not_checkpointed_yet_are_kept_from_their_events() -> None:
    # A step calling only read-only tools is checkpointed with the run's next step; cancelled
    # before it, the calls the log holds with their results are kept, once each; a call with no
    # result yet (a lookup cut short, a response still streaming) is left out.
    stored: list[ModelMessage] = [
        ModelRequest.user_text_prompt("Hi"),
        ModelResponse(parts=[ToolCallPart("lookup_order", {"order_id": "ORD-1"}, tool_call_id="c0")]),
    ]
    events = [
        RunStarted(run_id="r", kind="message"),
        ToolResult(
            run_id="r", tool_call_id="c0", tool_name="lookup_order", outcome="success", content={"n": 0}
        ),
        ToolCall(run_id="r", tool_call_id="c1", tool_name="lookup_order", args={"order_id": "ORD-2"}),
        ToolCall(run_id="r", tool_call_id="c2", tool_name="search_faq", args={"_raw": "{not json"}),
        ToolCall(run_id="r", tool_call_id="c3", tool_name="search_faq", args={"query": "returns"}),
        ToolResult(
            run_id="r", tool_call_id="c1", tool_name="lookup_order", outcome="success", content={"n": 1}
        ),
        ToolResult(run_id="r", tool_call_id="c2", tool_name="search_faq", outcome="failed", content="bad"),
        TextDelta(run_id="r", part_id="a", delta="Let me see"),
    ]
    messages, kept = interrupted_messages(stored, _run(checkpoints=1), events)
    assert kept == "Let me see"
    assert shapes(messages) == snapshot(
        [
            "request: user-prompt",
            "response: tool-call(lookup_order)",
            "request: tool-return(lookup_order)",
            "response: tool-call(lookup_order), tool-call(search_faq)",
            "request: tool-return(lookup_order), tool-return(search_faq)",
            "response: text",
        ]
    )
    calls = messages[3]
    assert isinstance(calls, ModelResponse)
    assert [(c.tool_call_id, c.args) for c in calls.tool_calls] == [
        ("c1", {"order_id": "ORD-2"}),
        ("c2", "{not json"),
    ]
    returns = messages[4]
    assert isinstance(returns, ModelRequest)
    answered = [
        (p.tool_call_id, p.outcome, p.content) for p in returns.parts if isinstance(p, ToolReturnPart)
    ]
    assert answered == [("c1", "success", {"n": 1}), ("c2", "failed", "bad")]
