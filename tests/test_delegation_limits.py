"""What holds for a delegated agent as for the top one (`agent/delegation.py`): its text passes the
output guardrails, its tools have their own timeouts; and the delegating tool's timeout does not
count the time spent in the sub-run. Events made by one translator (`agent/translation.py`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from inline_snapshot import snapshot
from pydantic_ai import Agent, RunContext

from agent import ChatApp, RunScope, Runtime, open_runtime, run_step, sub_conversation_id
from agent.guardrails import GuardrailContext, Guardrails, TextScanner
from store import NewRun
from stream import StoredEvent, StreamEvent, TextDelta, TextWithdrawn, event_from_data, transcript

from .conformance import Reply, Scripted

pytestmark = pytest.mark.anyio

LEAK = "The booking failed with an internal error at db-7."


async def logged(runtime: Runtime, thread_id: str) -> list[StreamEvent]:
    return [event_from_data(e.type, e.data) for e in await runtime.db.events.read(thread_id)]


async def start(runtime: Runtime) -> tuple[str, str]:
    thread = await runtime.db.threads.create(user_id="ada", title="t")
    queued = await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Book"))
    return thread.thread_id, queued.run.run_id


def desk(inner: list[Reply], *, tool: str = "ask_booking", **options: Any) -> ChatApp[RunScope]:
    """`travel` asks `booking` through `ask_booking`, then says what it answered; `booking` plays `inner`."""
    booking = Agent(Scripted(inner, prefix="booking").model(), name="booking", deps_type=RunScope)
    travel = Agent(
        Scripted([[(tool, {"task": "go"})], "travel done"], prefix="travel").model(),
        name="travel",
        deps_type=RunScope,
    )

    @booking.tool
    async def hang(ctx: RunContext[RunScope]) -> str:  # pyright: ignore[reportUnusedFunction]
        """Never answers."""
        await asyncio.Event().wait()
        return "never"

    @booking.tool_plain
    def look() -> str:  # pyright: ignore[reportUnusedFunction]
        """Look the booking up."""
        return "seat 3A"

    @travel.tool
    async def ask_booking(ctx: RunContext[RunScope], task: str) -> str:  # pyright: ignore[reportUnusedFunction]
        """Ask the booking agent."""
        return await ctx.deps.delegate(ctx, booking, task, deps=ctx.deps)

    @travel.tool
    async def ask_slowly(ctx: RunContext[RunScope], task: str) -> str:  # pyright: ignore[reportUnusedFunction]
        """Wait a moment of its own, then answer."""
        await asyncio.sleep(0)  # gives the loop a turn: an expired deadline fires here
        return "asked"

    return ChatApp(agent=travel, deps=lambda scope: scope, **options)


async def test_a_delegated_agents_text_passes_the_output_guardrails(database_url: str) -> None:
    async with open_runtime(desk([LEAK]), database_url) as runtime:
        thread_id, run_id = await start(runtime)
        assert await run_step(runtime, run_id) == "completed"
        events = await logged(runtime, thread_id)
        inner = await runtime.db.conversations.load(sub_conversation_id(thread_id, "travel_0_0"))

    withheld = runtime.app.texts.withheld
    assert [line.replace(run_id[:8], "run") for line in transcript(events)] == snapshot(
        [
            "travel: run_started message",
            "travel: user_message 'Book'",
            "travel: tool_call ask_booking {'task': 'go'}",
            "booking: text travel_0_0.1.0: 'The booking failed with an '",
            "booking: guardrail_tripped output internal_leak",
            'booking: text_withdrawn travel_0_0.1.0 -> "I\'m sorry, something went wrong on our side while answering. Please try again, or ask me something else."',
            'travel: tool_result ask_booking success "I\'m sorry, something went wrong on our side while answering. Please try again, or ask me something else."',
            "travel: text run.1.2.0: 'travel done'",
            "travel: text_done run.1.2.0 'travel done'",
            "travel: run_finished completed output='travel done'",
        ]
    )
    # Not a word of the leak was shown, given to the parent or stored.
    assert all("internal error" not in repr(e) for e in events)
    assert inner is not None
    assert "internal error" not in repr(inner.messages)
    assert withheld in repr(inner.messages[-1])


async def test_the_delegating_tools_timeout_does_not_count_the_sub_run(database_url: str) -> None:
    # A deadline of 0 expires at the tool's first wait: only the time outside the sub-run counts.
    app = desk(["booked"], tool_timeouts={"ask_booking": 0, "ask_slowly": 0})
    async with open_runtime(app, database_url) as runtime:
        thread_id, run_id = await start(runtime)
        assert await run_step(runtime, run_id) == "completed"
        events = await logged(runtime, thread_id)
    results = [(e.agent, e.tool_name, e.outcome, e.content) for e in events if e.type == "tool_result"]
    assert results == [("travel", "ask_booking", "success", "booked")]


async def test_a_tool_that_waits_on_its_own_still_times_out(database_url: str) -> None:
    # The other side of the test above: the same deadline stops a tool that waits outside a sub-run.
    async with open_runtime(
        desk(["booked"], tool="ask_slowly", tool_timeouts={"ask_slowly": 0}), database_url
    ) as runtime:
        thread_id, run_id = await start(runtime)
        assert await run_step(runtime, run_id) == "completed"
        events = await logged(runtime, thread_id)
    [result] = [e for e in events if e.type == "tool_result"]
    assert (result.tool_name, result.outcome) == ("ask_slowly", "failed")
    assert "did not answer within 0 seconds" in str(result.content)


async def test_a_delegated_agents_tools_have_their_own_timeouts(database_url: str) -> None:
    app = desk([[("hang", {})], "booking could not finish"], tool_timeouts={"hang": 0, "ask_booking": None})
    async with open_runtime(app, database_url) as runtime:
        thread_id, run_id = await start(runtime)
        assert await run_step(runtime, run_id) == "completed"
        events = await logged(runtime, thread_id)
    results = [(e.agent, e.tool_name, e.outcome) for e in events if e.type == "tool_result"]
    assert results == [("booking", "hang", "failed"), ("travel", "ask_booking", "success")]


async def test_a_delegated_agents_read_only_calls_are_stored_with_their_results(database_url: str) -> None:
    # Its response calling only `look` is not stored before `look` runs, but with its result: nothing is lost.
    app = desk([[("look", {})], "booked seat 3A"], read_only_tools={"look"})
    async with open_runtime(app, database_url) as runtime:
        thread_id, run_id = await start(runtime)
        assert await run_step(runtime, run_id) == "completed"
        inner = await runtime.db.conversations.load(sub_conversation_id(thread_id, "travel_0_0"))
    assert inner is not None
    assert [type(m).__name__ for m in inner.messages] == [
        "ModelRequest",
        "ModelResponse",
        "ModelRequest",
        "ModelResponse",
    ]
    assert "seat 3A" in repr(inner.messages[2])


class WholeTextOnly:
    """An output guardrail whose scanner lets everything stream and whose `check` trips on the whole
    part: the trip no scanner foresaw, which withdraws text already shown."""

    name = "whole_text"
    reply = "[withdrawn]"

    def check(self, text: str, context: GuardrailContext) -> bool:
        return "secret plan" in text

    def scanner(self) -> TextScanner:
        return _ShowsAll()


class _ShowsAll:
    def feed(self, text: str) -> int | None:
        return len(text)


@pytest.mark.parametrize(
    "inner",
    [
        pytest.param(["Our secret plan is ready"], id="first-response"),
        # After a tool's result, the deltas wait for the run's checkpoint (`agent.eventlog`).
        pytest.param([[("look", {})], "Our secret plan is ready"], id="after-a-tool"),
    ],
)
async def test_a_delegated_agents_text_withdrawn_whole_is_blanked_in_the_log(
    inner: list[Reply], database_url: str
) -> None:
    app = desk(inner, guardrails=Guardrails(output=[WholeTextOnly()]))
    published: list[StoredEvent] = []
    async with open_runtime(app, database_url, publish=lambda _, events: published.extend(events)) as runtime:
        thread_id, run_id = await start(runtime)
        assert await run_step(runtime, run_id) == "completed"
        stored = {
            e.event_id: event_from_data(e.type, e.data) for e in await runtime.db.events.read(thread_id)
        }
        conversation = await runtime.db.conversations.load(sub_conversation_id(thread_id, "travel_0_0"))

    part = f"travel_0_0.{len(inner)}.0"
    live = [p for p in published if isinstance(p.event, TextDelta) and p.event.part_id == part]
    # The live client was shown some of it before the whole part tripped `check`, then the withdrawal.
    assert "".join(p.event.delta for p in live if isinstance(p.event, TextDelta)).startswith("Our secret")
    # The log holds the same events, blanked, and the withdrawal: a replay ends as the live view did.
    # Blanked, each keeps its trace id, as every event of the run.
    assert [stored[p.event_id] for p in live] == [
        TextDelta(
            run_id=run_id,
            agent="booking",
            parent_tool_call_id="travel_0_0",
            part_id=part,
            delta="",
            trace_id=p.event.trace_id,
        )
        for p in live
    ]
    withdrawn = [e for e in stored.values() if isinstance(e, TextWithdrawn)]
    assert [(e.part_id, e.replacement, e.agent) for e in withdrawn] == [(part, "[withdrawn]", "booking")]
    assert all("secret" not in repr(e) for e in stored.values())
    assert conversation is not None
    assert "secret" not in repr(conversation.messages)
