"""Every agent pauses with its output type as written (`agent/pauses.py`): output validators, every
output form, `DeferredToolRequests` already in the type; paused, approved, resumed, completed, and
continued by a new process after a crash. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest
from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    ModelRetry,
    NativeOutput,
    PromptedOutput,
    RunContext,
    TextOutput,
    ToolOutput,
)
from pydantic_ai.capabilities import HandleDeferredToolCalls
from pydantic_ai.messages import ModelRequest, ToolReturnPart
from pydantic_ai.models.function import FunctionModel

from agent import ChatApp, Runtime, decide, open_runtime, run_step
from agent.pauses import names_deferred_requests
from store import NewRun, RunStatus
from stream import CollectingSink, RunFinished, StreamEvent, ToolResult, event_from_data

from .conformance import City, NoCity, Reply, Scripted, make_city, shout, wire_tool

pytestmark = pytest.mark.anyio

WIRE: Reply = [("wire", {"to": "bob", "cents": 500})]


def validated(model: FunctionModel, ran: Counter[str], output_type: Any, **options: Any) -> Agent[Any, Any]:
    """An agent with the approval tool `wire` and an output validator refusing Atlantis."""
    built = Agent(model, output_type=output_type, tools=[wire_tool(ran, requires_approval=True)], **options)

    @built.output_validator
    def no_atlantis(output: Any) -> Any:  # pyright: ignore[reportUnusedFunction]
        ran["validated"] += 1
        if isinstance(output, City) and output.name == "Atlantis":
            raise ModelRetry("Atlantis is not a city anyone can fly to")
        return output

    return built


@asynccontextmanager
async def served(
    build: Callable[[FunctionModel], Agent[Any, Any]], replies: list[Reply], url: str
) -> AsyncIterator[Runtime]:
    async with open_runtime(ChatApp(agent=build(Scripted(replies).model())), url) as runtime:
        yield runtime


async def approve_all(runtime: Runtime, thread_id: str) -> str:
    """Approve every pending call of the thread; the resume run's id."""
    resume = None
    for approval in await runtime.db.approvals.list(thread_id=thread_id, status="pending"):
        decision = await decide(
            runtime.db, thread_id, approval.tool_call_id, decision="approved", decided_by="ada"
        )
        resume = decision.resume_run_id or resume
    assert resume is not None
    return resume


async def finished(runtime: Runtime, thread_id: str) -> list[RunFinished]:
    log = [event_from_data(e.type, e.data) for e in await runtime.db.events.read(thread_id)]
    return [event for event in log if isinstance(event, RunFinished)]


async def test_an_agent_with_an_output_validator_and_a_union_pauses_and_completes(database_url: str) -> None:
    ran: Counter[str] = Counter()
    replies: list[Reply] = [
        WIRE,
        [("final_result_City", {"name": "Atlantis"})],
        [("final_result_City", {"name": "Paris"})],
    ]
    async with served(lambda m: validated(m, ran, City | NoCity), replies, database_url) as runtime:
        thread = await runtime.db.threads.create(user_id="ada", title="t")
        run = (
            await runtime.db.runs.queue(
                NewRun(thread_id=thread.thread_id, kind="message", content="Wire bob 5")
            )
        ).run
        assert await run_step(runtime, run.run_id) == "awaiting_approval"
        assert ran["wire"] == 0
        [pending] = await runtime.db.approvals.list(thread_id=thread.thread_id, status="pending")
        assert (pending.tool_name, dict(pending.args)) == ("wire", {"to": "bob", "cents": 500})

        assert await run_step(runtime, await approve_all(runtime, thread.thread_id)) == "completed"
        conversation = await runtime.db.conversations.load(thread.thread_id)
        ends = await finished(runtime, thread.thread_id)

    assert ran == Counter(wire=1, validated=2)  # Atlantis refused by the validator, then Paris
    assert [(end.status, end.output, end.output_type) for end in ends] == [
        ("awaiting_approval", None, None),
        ("completed", {"name": "Paris"}, "City"),
    ]
    assert conversation is not None
    parts = [
        part
        for message in conversation.messages
        if isinstance(message, ModelRequest)
        for part in message.parts
    ]
    # The refusal went back to the model as the output call's retry, then it answered again.
    retried = [p for p in parts if isinstance(p, ToolReturnPart) and p.tool_name == "final_result_City"]
    assert [p.model_response_str() for p in retried] == [
        '{"error":"Atlantis is not a city anyone can fly to"}',
        "Final result processed.",
    ]
    assert "wired 500 to bob" in [part.content for part in parts if isinstance(part, ToolReturnPart)]


FORMS: list[tuple[str, Any, Reply, object]] = [
    ("str", str, "Wired.", "Wired."),
    ("a model", City, [("final_result", {"name": "Paris"})], {"name": "Paris"}),
    ("a union", City | NoCity, [("final_result_NoCity", {"reason": "none"})], {"reason": "none"}),
    ("ToolOutput", ToolOutput(City, name="give_city"), [("give_city", {"name": "Paris"})], {"name": "Paris"}),
    ("NativeOutput", NativeOutput(City), '{"name": "Paris"}', {"name": "Paris"}),
    ("PromptedOutput", PromptedOutput(City), '{"name": "Paris"}', {"name": "Paris"}),
    ("TextOutput", TextOutput(shout), "wired", "WIRED"),
    ("an output function", make_city, [("final_result", {"name": "Paris"})], {"name": "Paris"}),
    ("DeferredToolRequests in the type", [str, DeferredToolRequests], "Wired.", "Wired."),
]


@pytest.mark.parametrize("validator", [False, True], ids=["plain", "with an output validator"])
@pytest.mark.parametrize(("form", "output_type", "answer", "output"), FORMS, ids=[f[0] for f in FORMS])
async def test_every_output_form_pauses_with_its_type_as_written(
    form: str, output_type: Any, answer: Reply, output: object, validator: bool, database_url: str
) -> None:
    ran: Counter[str] = Counter()

    def build(model: FunctionModel) -> Agent[Any, Any]:
        if validator:
            return validated(model, ran, output_type)
        return Agent(model, output_type=output_type, tools=[wire_tool(ran, requires_approval=True)])

    async with served(build, [WIRE, answer], database_url) as runtime:
        assert runtime.app.agent.output_type is output_type
        thread = await runtime.db.threads.create(user_id="ada", title=form)
        run = (
            await runtime.db.runs.queue(
                NewRun(thread_id=thread.thread_id, kind="message", content="Wire bob 5")
            )
        ).run
        assert await run_step(runtime, run.run_id) == "awaiting_approval"
        assert await run_step(runtime, await approve_all(runtime, thread.thread_id)) == "completed"
        ends = await finished(runtime, thread.thread_id)

    assert [end.status for end in ends] == ["awaiting_approval", "completed"]
    assert ends[-1].output == output
    assert ran["wire"] == 1
    assert ran["validated"] == (1 if validator else 0)


class _HoldAtResult(CollectingSink):
    """Holds the step once the approved call's result is emitted, for the test to kill it there."""

    def __init__(self) -> None:
        super().__init__()
        self.reached = asyncio.Event()

    async def emit(self, event: StreamEvent) -> None:
        await super().emit(event)
        if isinstance(event, ToolResult):
            self.reached.set()
            await asyncio.Event().wait()  # until the task is cancelled


async def test_a_paused_run_survives_its_process_and_a_crash_in_its_resume(database_url: str) -> None:
    ran: Counter[str] = Counter()
    replies: list[Reply] = [WIRE, [("final_result_City", {"name": "Paris"})]]
    model = Scripted(replies).model()
    app = ChatApp(agent=validated(model, ran, City | NoCity))
    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(open_runtime(app, database_url))
        thread = await first.db.threads.create(user_id="ada", title="t")
        run = (
            await first.db.runs.queue(
                NewRun(thread_id=thread.thread_id, kind="message", content="Wire bob 5")
            )
        ).run
        assert await run_step(first, run.run_id) == "awaiting_approval"
    # The process that paused is gone; another one takes the decision and runs the resume.
    async with AsyncExitStack() as stack:
        second = await stack.enter_async_context(open_runtime(app, database_url))
        resume = await approve_all(second, thread.thread_id)
        sink = _HoldAtResult()
        task = asyncio.create_task(run_step(second, resume, sink=sink))
        reached = asyncio.create_task(sink.reached.wait())
        await asyncio.wait([task, reached], return_when=asyncio.FIRST_COMPLETED)
        assert sink.reached.is_set(), "the resume never ran the approved call"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await second.db.runs.get(resume)).status == "queued"
    async with AsyncExitStack() as stack:
        third = await stack.enter_async_context(open_runtime(app, database_url))
        status: RunStatus = await run_step(third, resume)
        ends = await finished(third, thread.thread_id)
        log = [event_from_data(e.type, e.data) for e in await third.db.events.read(thread.thread_id)]

    assert status == "completed"
    # The killed step's result was emitted but never stored nor published: the next process runs the
    # approved call again (a tool that must act once goes through the ledger), and shows it once.
    assert ran == Counter(wire=2, validated=1)
    assert [(end.status, end.output) for end in ends] == [
        ("awaiting_approval", None),
        ("completed", {"name": "Paris"}),
    ]
    shown = [event.content for event in log if isinstance(event, ToolResult) and event.tool_name == "wire"]
    assert shown == ["wired 500 to bob"]


async def test_a_users_deferred_call_handler_answers_before_the_run_would_pause(database_url: str) -> None:
    ran: Counter[str] = Counter()

    async def approve(ctx: RunContext[Any], requests: DeferredToolRequests) -> DeferredToolResults:
        return requests.build_results(approve_all=True)

    def build(model: FunctionModel) -> Agent[Any, Any]:
        return validated(model, ran, City | NoCity, capabilities=[HandleDeferredToolCalls(handler=approve)])

    async with served(build, [WIRE, [("final_result_City", {"name": "Paris"})]], database_url) as runtime:
        thread = await runtime.db.threads.create(user_id="ada", title="t")
        run = (
            await runtime.db.runs.queue(
                NewRun(thread_id=thread.thread_id, kind="message", content="Wire bob 5")
            )
        ).run
        assert await run_step(runtime, run.run_id) == "completed"
        assert await runtime.db.approvals.list(thread_id=thread.thread_id) == []

    assert ran == Counter(wire=1, validated=1)


async def test_a_handler_answering_only_part_of_a_step_fails_the_run_saying_why(database_url: str) -> None:
    ran: Counter[str] = Counter()

    async def approve_wire(ctx: RunContext[Any], requests: DeferredToolRequests) -> DeferredToolResults:
        return DeferredToolResults(
            approvals={c.tool_call_id: True for c in requests.approvals if c.tool_name == "wire"}
        )

    def build(model: FunctionModel) -> Agent[Any, Any]:
        built = validated(model, ran, str, capabilities=[HandleDeferredToolCalls(handler=approve_wire)])
        built.tool_plain(requires_approval=True)(shout)
        return built

    both: Reply = [("wire", {"to": "bob", "cents": 500}), ("shout", {"text": "hi"})]
    async with served(build, [both, "Done."], database_url) as runtime:
        thread = await runtime.db.threads.create(user_id="ada", title="t")
        run = (
            await runtime.db.runs.queue(
                NewRun(thread_id=thread.thread_id, kind="message", content="Wire bob 5")
            )
        ).run
        assert await run_step(runtime, run.run_id) == "failed"
        stored = await runtime.db.runs.get(run.run_id)
        pending = await runtime.db.approvals.list(thread_id=thread.thread_id)

    assert stored.error == (
        "UserError: a HandleDeferredToolCalls capability answered only some of a step's deferred calls "
        "(wire): durable-chat pauses a step's calls all together, so it cannot keep those answers; "
        "answer all of a step's calls, or none"
    )
    assert pending == []
    assert ran["wire"] == 0  # the handler's approval never acted


def test_deferred_requests_are_found_in_every_spelling_of_an_output_type() -> None:
    assert names_deferred_requests(DeferredToolRequests)
    assert names_deferred_requests([City, DeferredToolRequests])
    assert names_deferred_requests(City | DeferredToolRequests)
    assert not names_deferred_requests(City | NoCity)
    assert not names_deferred_requests([str, ToolOutput(City)])
    assert not names_deferred_requests(str)
