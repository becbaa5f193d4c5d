"""What a sub-run stores, and when (`agent/delegation.py`): a step of read-only calls with its end,
its output kept only when its stored messages cannot give it again, an end in text stored by its
parent's checkpoint of the call's result, and a sub-run whose end was stored taken up from it with
no model call and no tool run again. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from agent import ChatApp, RunScope, Runtime, decide, open_runtime, run_step, sub_conversation_id
from store import NewRun, RunStatus
from stream import CollectingSink, StreamEvent, TextDone, ToolResult, event_from_data

from .test_delegation import returns

pytestmark = pytest.mark.anyio

PARENT = "ask_1"
"""The id of the router's call that delegates."""


class Booked(BaseModel):
    seat: str


@dataclass
class Probe:
    """What a tool of the sub-run saw of its stored conversation."""

    runtime: Runtime | None = None
    seen: list[int | None] = field(default_factory=list[int | None])
    """How many messages of the sub-run were stored as each tool acted (`None`: none)."""


def counted_model(
    name: str,
    first: tuple[str, dict[str, Any]],
    answer: str | tuple[str, dict[str, Any]],
    calls: Counter[str],
) -> FunctionModel:
    """Calls `first`, then answers `answer` (a text, or a call) once the call's result is in; counts
    its calls in `calls[name]`."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        calls[name] += 1
        last = messages[-1]
        done = isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts)
        if done and isinstance(answer, str):
            yield answer
            return
        tool, args = answer if done and not isinstance(answer, str) else first
        yield {0: DeltaToolCall(name=tool, json_args=json.dumps(args), tool_call_id=f"{tool}_1")}

    return FunctionModel(stream_function=stream, model_name=name)


def desk(
    calls: Counter[str], *, structured: bool = False, tool: str = "look", probe: Probe | None = None
) -> ChatApp[RunScope]:
    """`router` asks `booking` through `ask`; `booking` calls `tool` and answers. `look` is read-only;
    `hold` acts through the ledger and `note` does not, each putting in `probe.seen` how many
    messages of the sub-run were stored when it acted."""
    answer: str | tuple[str, dict[str, Any]] = ("final_result", {"seat": "3A"}) if structured else "seat 3A"
    booking = Agent(
        counted_model("booking", (tool, {}), answer, calls),
        name="booking",
        deps_type=RunScope,
        output_type=Booked if structured else str,
    )
    router = Agent(
        counted_model("router", ("ask", {"task": "book"}), "done", calls),
        name="router",
        deps_type=RunScope,
    )

    @booking.tool_plain
    def look() -> str:  # pyright: ignore[reportUnusedFunction]
        """Look the seat up."""
        calls["look"] += 1
        return "3A"

    async def stored_messages(ctx: RunContext[RunScope]) -> None:
        assert probe is not None
        assert probe.runtime is not None
        sub = await probe.runtime.db.conversations.load(sub_conversation_id(ctx.deps.thread_id, PARENT))
        probe.seen.append(None if sub is None else len(sub.messages))

    @booking.tool
    async def hold(ctx: RunContext[RunScope]) -> str:  # pyright: ignore[reportUnusedFunction]
        """Hold the seat."""

        async def effect(connection: object) -> str:
            return "3A"

        seat = await ctx.deps.ledger.once(ctx, effect)
        await stored_messages(ctx)
        return seat

    @booking.tool
    async def note(ctx: RunContext[RunScope]) -> str:  # pyright: ignore[reportUnusedFunction]
        """Note the request."""
        await stored_messages(ctx)
        return "3A"

    @router.tool
    async def ask(ctx: RunContext[RunScope], task: str) -> str:  # pyright: ignore[reportUnusedFunction]
        """Ask the booking agent."""
        output = await ctx.deps.delegate(ctx, booking, task, deps=ctx.deps)
        return output if isinstance(output, str) else f"seat {output.seat}"

    return ChatApp(agent=router, deps=lambda scope: scope, read_only_tools={"look"})


async def start(runtime: Runtime) -> tuple[str, str]:
    thread = await runtime.db.threads.create(user_id="ada", title="t")
    run = (
        await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Book"))
    ).run
    return thread.thread_id, run.run_id


async def logged(runtime: Runtime, thread_id: str) -> list[StreamEvent]:
    return [event_from_data(e.type, e.data) for e in await runtime.db.events.read(thread_id)]


class CancelAtParentResult(CollectingSink):
    """Cancels the task driving the run as the delegating call's result is emitted: the sub-run has
    ended and stored its end, the parent's checkpoint has not stored that result yet."""

    def __init__(self) -> None:
        super().__init__()
        self.task: asyncio.Task[RunStatus] | None = None

    async def emit(self, event: StreamEvent) -> None:
        await super().emit(event)
        if isinstance(event, ToolResult) and event.tool_call_id == PARENT and self.task is not None:
            self.task.cancel()
            self.task = None


async def interrupted(runtime: Runtime, run_id: str) -> RunStatus:
    """Drive the run, cancelled between its sub-run's end and its parent's checkpoint, then again."""
    sink = CancelAtParentResult()
    sink.task = task = asyncio.create_task(run_step(runtime, run_id, sink=sink))
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await runtime.db.runs.get(run_id)).status == "queued"
    return await run_step(runtime, run_id)


@pytest.mark.parametrize("structured", [False, True], ids=["text", "output tool"])
async def test_a_sub_run_cancelled_between_its_end_and_its_parents_checkpoint_resumes_exactly(
    database_url: str, structured: bool
) -> None:
    calls = Counter[str]()
    async with open_runtime(desk(calls, structured=structured), database_url) as runtime:
        thread_id, run_id = await start(runtime)
        assert await interrupted(runtime, run_id) == "completed"
        inner = await runtime.db.conversations.load(sub_conversation_id(thread_id, PARENT))
        outer = await runtime.db.conversations.load(thread_id)
        kept = await runtime.db.ledger.get(thread_id, f"{PARENT}#delegated")
        events = await logged(runtime, thread_id)
    if structured:
        # Its end, with its output kept, was stored at once: the sub-run's model and tool ran once
        # each step; the router's first model call ran again (its response calling `ask` was stored
        # with the sub-run's end, the recovery continues from it).
        assert calls == {"booking": 2, "look": 1, "router": 2}
    else:
        # Ended in text, its end waits for the router's checkpoint storing the call's result
        # (`RunCheckpoints.fold`), as a tool step's results wait for the request sending them: cut
        # before it, nothing of either was stored, and both run again.
        assert calls == {"booking": 4, "look": 2, "router": 3}
    assert outer is not None
    assert inner is not None
    assert returns(outer.messages) == [("ask", "seat 3A")]
    assert [type(m).__name__ for m in inner.messages] == (
        ["ModelRequest", "ModelResponse", "ModelRequest", "ModelResponse", "ModelRequest"]
        if structured
        else ["ModelRequest", "ModelResponse", "ModelRequest", "ModelResponse"]
    )
    # Ended in text, its stored end gives its output again; an output tool's is kept with that end.
    assert (kept is not None) == structured
    if kept is not None:
        assert (kept.status, kept.result) == ("succeeded", {"seat": "3A"})
    shown = Counter(
        (e.type, getattr(e, "tool_call_id", None)) for e in events if e.type in ("tool_call", "tool_result")
    )
    # Every call and result shown once, the sub-run's too, whichever checkpoint stored them.
    calls_shown = [PARENT, "look_1", *(["final_result_1"] if structured else [])]
    assert shown == {(kind, call): 1 for call in calls_shown for kind in ("tool_call", "tool_result")}


@pytest.mark.usefixtures("no_slow_tools")
async def test_told_not_to_carry_the_routers_response_a_sub_run_has_it_saved_before_it_starts(
    database_url: str,
) -> None:
    # Carried by default on both databases (on SQLite in one unit of work on the loop's thread:
    # `test_the_routers_response_is_stored_with_the_sub_runs_first_checkpoint`); without, the router's
    # response is saved alone before the sub-run starts, as a nested sub-run's parents' are.
    calls = Counter[str]()
    async with open_runtime(desk(calls), database_url) as runtime:
        assert runtime.db.conversations.carrying_pays
        runtime.db.conversations.carrying_pays = False
        thread_id, run_id = await start(runtime)
        saves = carried_saves(runtime, thread_id)
        assert await run_step(runtime, run_id) == "completed"
        outer = await runtime.db.conversations.load(thread_id)
    inner = sub_conversation_id(thread_id, PARENT)
    assert saves == [(thread_id, None), (inner, None), (thread_id, None), (thread_id, None)]
    assert outer is not None
    assert [m.kind for m in outer.messages] == ["request", "response"] * 2
    assert calls == {"router": 2, "booking": 2, "look": 1}


async def test_a_read_only_step_of_a_sub_run_is_stored_with_its_end(database_url: str) -> None:
    calls = Counter[str]()
    async with open_runtime(desk(calls), database_url) as runtime:
        thread_id, run_id = await start(runtime)
        saved: list[int] = []
        conversations = runtime.db.conversations
        save_with = conversations.save_with

        async def counting(conversation: Any, **options: Any) -> Any:
            first = options.get("first")
            for saving in (first.conversation if first is not None else None, conversation):
                if saving is not None and saving.conversation_id == sub_conversation_id(thread_id, PARENT):
                    saved.append(len(saving.messages))
            return await save_with(conversation, **options)

        conversations.save_with = counting  # pyright: ignore[reportAttributeAccessIssue]
        assert await run_step(runtime, run_id) == "completed"
    # One save, at its end: its prompt, the response calling `look`, its result, its answer.
    assert saved == [4]


@pytest.mark.parametrize(
    ("tool", "seen"),
    [("note", [None]), ("hold", [2])],
    ids=["plain tool", "ledger effect"],
)
async def test_a_sub_runs_response_is_stored_before_its_tools_only_for_an_effect_keyed_by_the_call(
    database_url: str, tool: str, seen: list[int | None]
) -> None:
    # As the top run's: a response calling tools waits for the save of their results, unless a tool
    # does something keyed by its call id (the ledger), which stores it first.
    calls, probe = Counter[str](), Probe()
    async with open_runtime(desk(calls, tool=tool, probe=probe), database_url) as runtime:
        probe.runtime = runtime
        thread_id, run_id = await start(runtime)
        assert await run_step(runtime, run_id) == "completed"
        inner = await runtime.db.conversations.load(sub_conversation_id(thread_id, PARENT))
    assert probe.seen == seen
    assert inner is not None
    # Nothing lost: its prompt, the response calling the tool, its result and its answer.
    assert [m.kind for m in inner.messages] == ["request", "response"] * 2
    assert calls == {"router": 2, "booking": 2}


def carried_saves(runtime: Runtime, thread_id: str, then: Any = None) -> list[tuple[str, str | None]]:
    """Record each save of the thread's and the sub-run's conversations, as (whose, whose it
    carried first); `then(carried)` runs around a save that carries one (see `cancelling`)."""
    saves: list[tuple[str, str | None]] = []
    conversations = runtime.db.conversations
    save_with = conversations.save_with

    async def recording(conversation: Any, **options: Any) -> Any:
        first = options.get("first")
        carried = None if first is None else first.conversation.conversation_id
        saves.append((conversation.conversation_id, carried))
        if then is None or carried is None:
            return await save_with(conversation, **options)
        return await then(save_with(conversation, **options))

    conversations.save_with = recording  # pyright: ignore[reportAttributeAccessIssue]
    return saves


@pytest.fixture
def no_slow_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool running past `SLOW_TOOL` has the response calling it stored meanwhile: on a loaded
    machine, the delegating tool would, whatever it does."""
    monkeypatch.setattr("agent.checkpointing.SLOW_TOOL", 3600.0)


@pytest.mark.usefixtures("no_slow_tools")
@pytest.mark.parametrize("tool", ["look", "note"], ids=["read-only step", "plain step"])
async def test_the_routers_response_is_stored_with_the_sub_runs_first_checkpoint(
    database_url: str, tool: str
) -> None:
    # The response calling `ask` waits for a checkpoint, as a response calling tools does. A sub-run
    # whose only save is its end (its step read-only) has that end stored by the router's checkpoint
    # of the call's result, with the response, in one transaction (`RunCheckpoints.fold`); one that
    # stores a step first (a plain tool's results, as they go out) carries the response in that one.
    calls, probe = Counter[str](), Probe()
    async with open_runtime(desk(calls, tool=tool, probe=probe), database_url) as runtime:
        probe.runtime = runtime
        thread_id, run_id = await start(runtime)
        saves = carried_saves(runtime, thread_id)
        assert await run_step(runtime, run_id) == "completed"
        outer = await runtime.db.conversations.load(thread_id)
        stored = await runtime.db.conversations.load(sub_conversation_id(thread_id, PARENT))
    inner = sub_conversation_id(thread_id, PARENT)
    if tool == "look":
        assert saves == [(thread_id, inner), (thread_id, None)]
    else:
        assert saves == [(inner, thread_id), (thread_id, inner), (thread_id, None)]
    assert outer is not None
    assert [m.kind for m in outer.messages] == ["request", "response"] * 2
    assert stored is not None
    assert [m.kind for m in stored.messages] == ["request", "response"] * 2
    assert calls == {"router": 2, "booking": 2, **({"look": 1} if tool == "look" else {})}


@pytest.mark.usefixtures("no_slow_tools")
@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_run_cancelled_around_the_carrying_checkpoint_resumes_exactly(
    database_url: str, when: str
) -> None:
    # Cancelled as the sub-run's end is about to be stored with the router's response and the call's
    # result (nothing stored: both run again, each call and result shown once), or just after (all
    # stored: the router continues from the call's result; the sub-run is not run again, and of the
    # router's model calls only the one the cancellation cut, if it had begun, is asked again).
    calls, cancelled, cut = Counter[str](), list[bool](), Counter[str]()
    sqlite = database_url.startswith("sqlite")

    async def cancelling(saving: Any) -> Any:
        # The first attempt's only: the recovery's saves go through.
        task = asyncio.current_task()
        assert task is not None
        first = not cancelled
        cancelled.append(True)
        if first and when == "before":
            task.cancel()
            if sqlite:
                # The carrying save is one unit of work on the loop's thread, which never yields: a
                # cancellation lands before it or after it. Before: it lands here, with nothing stored.
                saving.close()
                await asyncio.Event().wait()  # never set
        saved = await saving
        if first and when == "after":
            task.cancel()
        return saved

    async with open_runtime(desk(calls), database_url) as runtime:
        thread_id, run_id = await start(runtime)
        carried_saves(runtime, thread_id, cancelling)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.create_task(run_step(runtime, run_id))
        cut.update(calls)
        assert (await runtime.db.runs.get(run_id)).status == "queued"
        assert await run_step(runtime, run_id) == "completed"
        inner = await runtime.db.conversations.load(sub_conversation_id(thread_id, PARENT))
        outer = await runtime.db.conversations.load(thread_id)
        events = await logged(runtime, thread_id)
    if when == "before":
        assert (cut, calls) == (
            {"router": 1, "booking": 2, "look": 1},
            {"router": 3, "booking": 4, "look": 2},
        )
    else:
        assert calls == {"router": cut["router"] + 1, "booking": 2, "look": 1}
    assert outer is not None
    assert inner is not None
    assert [m.kind for m in outer.messages] == ["request", "response"] * 2
    assert [m.kind for m in inner.messages] == ["request", "response"] * 2
    shown = Counter(
        (e.type, getattr(e, "tool_call_id", None)) for e in events if e.type in ("tool_call", "tool_result")
    )
    assert shown == {(kind, call): 1 for call in (PARENT, "look_1") for kind in ("tool_call", "tool_result")}
    texts = [e for e in events if e.type == "text_done"]
    assert [e.parent_tool_call_id for e in texts] == [PARENT, None]


def booking_agent(calls: Counter[str]) -> Agent[RunScope, str]:
    """`booking` calls `look` (read-only) and answers in text: its end waits for its parent's checkpoint."""
    booking = Agent(
        counted_model("booking", ("look", {}), "seat 3A", calls), name="booking", deps_type=RunScope
    )

    @booking.tool_plain
    def look() -> str:  # pyright: ignore[reportUnusedFunction]
        """Look the seat up."""
        calls["look"] += 1
        return "3A"

    return booking


def router_model(calls: Counter[str], *tools: str) -> FunctionModel:
    """Calls `tools` at once (each `<tool>_1`, `ask` with a task), then answers "done"."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        calls["router"] += 1
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
            yield "done"
            return
        yield {
            i: DeltaToolCall(
                name=tool, json_args='{"task": "book"}' if tool == "ask" else "{}", tool_call_id=f"{tool}_1"
            )
            for i, tool in enumerate(tools)
        }

    return FunctionModel(stream_function=stream, model_name="router")


@pytest.mark.usefixtures("no_slow_tools")
async def test_a_sub_runs_end_waiting_for_its_parents_checkpoint_is_stored_alone_before_a_pause(
    database_url: str,
) -> None:
    # The router calls `ask` and `refund` (approval required) at once: the step pauses, and a pause's
    # trip carries nothing, so the sub-run's end is stored alone first (with the router's response
    # calling it). The decision resumes the router; the sub-run is taken up from its stored end.
    calls = Counter[str]()
    booking = booking_agent(calls)
    router = Agent(router_model(calls, "ask", "refund"), name="router", deps_type=RunScope)

    @router.tool
    async def ask(ctx: RunContext[RunScope], task: str) -> str:  # pyright: ignore[reportUnusedFunction]
        """Ask the booking agent."""
        return await ctx.deps.delegate(ctx, booking, task, deps=ctx.deps)

    @router.tool_plain(requires_approval=True)
    def refund() -> str:  # pyright: ignore[reportUnusedFunction]
        """Refund the booking."""
        calls["refund"] += 1
        return "refunded"

    app = ChatApp(agent=router, deps=lambda scope: scope, read_only_tools={"look"})
    async with open_runtime(app, database_url) as runtime:
        thread_id, run_id = await start(runtime)
        saves = carried_saves(runtime, thread_id)
        assert await run_step(runtime, run_id) == "awaiting_approval"
        paused = list(saves)
        stored = await runtime.db.conversations.load(sub_conversation_id(thread_id, PARENT))
        [pending] = await runtime.db.approvals.list(thread_id=thread_id, status="pending")
        decided = await decide(
            runtime.db, thread_id, pending.tool_call_id, decision="approved", decided_by="ada"
        )
        assert decided.resume_run_id is not None
        assert await run_step(runtime, decided.resume_run_id) == "completed"
        outer = await runtime.db.conversations.load(thread_id)
        events = await logged(runtime, thread_id)
    inner = sub_conversation_id(thread_id, PARENT)
    assert paused == [(inner, thread_id), (thread_id, None)]
    assert stored is not None
    assert [m.kind for m in stored.messages] == ["request", "response"] * 2
    assert calls == {"router": 2, "booking": 2, "look": 1, "refund": 1}
    assert outer is not None
    assert sorted(returns(outer.messages)) == [("ask", "seat 3A"), ("refund", "refunded")]
    shown = Counter(
        (e.type, getattr(e, "tool_call_id", None)) for e in events if e.type in ("tool_call", "tool_result")
    )
    assert shown == {
        (kind, call): 1 for call in (PARENT, "refund_1", "look_1") for kind in ("tool_call", "tool_result")
    }


@pytest.mark.usefixtures("no_slow_tools")
async def test_a_call_delegating_to_two_agents_in_turn_gives_each_its_own_conversation(
    database_url: str,
) -> None:
    # Each delegation of one call is a sub-run of its own (`…/ask_1`, then `…/ask_1~2`). Folded, the
    # first one's end waits for the router's checkpoint; the second delegation stores it first, alone,
    # carrying the router's response. Cut in the second's tool, the call runs again: the first sub-run
    # is taken up from its stored end (no model call), the second starts over from its prompt.
    calls = Counter[str]()
    booking = booking_agent(calls)
    hotels = Agent(counted_model("hotels", ("find", {}), "room 12", calls), name="hotels", deps_type=RunScope)
    router = Agent(router_model(calls, "ask"), name="router", deps_type=RunScope)

    @hotels.tool_plain
    def find() -> str:  # pyright: ignore[reportUnusedFunction]
        """Find a room."""
        calls["find"] += 1
        if calls["find"] == 1:
            raise asyncio.CancelledError  # the attempt is cut short here, once
        return "12"

    @router.tool
    async def ask(ctx: RunContext[RunScope], task: str) -> str:  # pyright: ignore[reportUnusedFunction]
        """Ask the booking agent, then the hotels agent."""
        seat = await ctx.deps.delegate(ctx, booking, task, deps=ctx.deps)
        room = await ctx.deps.delegate(ctx, hotels, task, deps=ctx.deps)
        return f"{seat}, {room}"

    app = ChatApp(agent=router, deps=lambda scope: scope, read_only_tools={"look", "find"})
    async with open_runtime(app, database_url) as runtime:
        thread_id, run_id = await start(runtime)
        saves = carried_saves(runtime, thread_id)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.create_task(run_step(runtime, run_id))
        assert await run_step(runtime, run_id) == "completed"
        first = await runtime.db.conversations.load(sub_conversation_id(thread_id, PARENT))
        second = await runtime.db.conversations.load(sub_conversation_id(thread_id, PARENT, 2))
        outer = await runtime.db.conversations.load(thread_id)
        events = await logged(runtime, thread_id)
    assert calls == {"router": 2, "booking": 2, "look": 1, "hotels": 3, "find": 2}
    one, two = sub_conversation_id(thread_id, PARENT), sub_conversation_id(thread_id, PARENT, 2)
    assert saves == [(one, thread_id), (thread_id, two), (thread_id, None)]
    assert first is not None
    assert second is not None
    assert outer is not None
    answers = [m.text for m in (first.messages[-1], second.messages[-1]) if isinstance(m, ModelResponse)]
    assert answers == ["seat 3A", "room 12"]
    assert returns(outer.messages) == [("ask", "seat 3A, room 12")]
    texts = [(e.agent, e.parent_tool_call_id) for e in events if isinstance(e, TextDone)]
    assert texts == [("booking", PARENT), ("hotels", PARENT), ("router", None)]
