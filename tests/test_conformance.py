"""The pydantic-ai conformance suite: every row of `tests/conformance.py`, served by durable-chat.

Each row's agent runs its turns twice: alone, on pydantic-ai's own `InMemoryConversationStore`, and
through durable-chat on SQLite and PostgreSQL, pausing and approved where it has a tool that needs
approval. durable-chat's runs go uninterrupted, or are killed in the middle (in process: the step's
task cancelled, then the run continued by a new runtime on the same database, as a restarted
process would): once a tool's result is emitted, before its checkpoint stored it; or while the
model is asked again after a tool step, its results stored and shown.

Then: the stored conversation is pydantic-ai's own (but for times and run ids); every tool result
the event log shows is once, and the one the conversation holds; a tool whose result was shown never
ran again.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import InMemoryConversationStore
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest
from pydantic_core import to_jsonable_python

from agent import SAID_BY, ChatApp, Runtime, decide, open_runtime, run_step
from agent.pauses import names_deferred_requests
from store import NewRun, RunStatus
from stream import CollectingSink, StreamEvent, ToolResult, event_from_data

from .conformance import ROWS, Row, Scripted, feature_table

pytestmark = pytest.mark.anyio

Kill = Literal["never", "at a tool result", "asking the model again"]
VOLATILE = frozenset({"timestamp", "run_id", "conversation_id"})


@pytest.mark.parametrize("kill", ["never", "at a tool result", "asking the model again"])
@pytest.mark.parametrize("row", ROWS, ids=[row.feature for row in ROWS])
async def test_a_row_is_served_as_pydantic_ai_alone_runs_it(row: Row, kill: Kill, database_url: str) -> None:
    alone_ran: Counter[str] = Counter()
    expected = await alone(row, alone_ran)

    ran: Counter[str] = Counter()
    scripted = Scripted(row.replies)
    app = ChatApp(agent=row.build(scripted.model(), ran), deps=lambda scope: row.deps())
    async with AsyncExitStack() as stack:
        killer = Killer(kill, scripted, row, stack, app, database_url)
        runtime = await killer.open()
        thread = await runtime.db.threads.create(user_id="alice", title=row.feature)
        for prompt in row.prompts:
            run = (
                await killer.runtime.db.runs.queue(
                    NewRun(thread_id=thread.thread_id, kind="message", content=prompt)
                )
            ).run
            status = await killer.drive(run.run_id)
            while status == "awaiting_approval":
                assert row.approvals
                db = killer.runtime.db
                pending = await db.approvals.list(thread_id=thread.thread_id, status="pending")
                resume = None
                for approval in pending:
                    decision = await decide(
                        db, thread.thread_id, approval.tool_call_id, decision="approved", decided_by="alice"
                    )
                    resume = decision.resume_run_id or resume
                assert resume is not None
                status = await killer.drive(resume)
            assert status == "completed"
        db = killer.runtime.db
        conversation = await db.conversations.load(thread.thread_id)
        assert conversation is not None
        log = [event_from_data(e.type, e.data) for e in await db.events.read(thread.thread_id)]

    assert kill == "never" or killer.killed, "the kill never came"
    assert normalized(conversation.messages) == normalized(expected)
    shown = [event for event in log if isinstance(event, ToolResult)]
    assert len({event.tool_call_id for event in shown}) == len(shown), "a result shown twice"
    results = stored_results(conversation.messages)
    assert {event.tool_call_id: event.content for event in shown} == {
        call_id: content for call_id, content in results.items() if call_id in {e.tool_call_id for e in shown}
    }
    if kill == "at a tool result":
        assert not alone_ran - ran  # a tool whose result nobody saw may have run again
    else:
        assert ran == alone_ran


class Killer:
    """Drives runs on runtimes of one database; kills the first run that reaches its point."""

    def __init__(
        self, kill: Kill, scripted: Scripted, row: Row, stack: AsyncExitStack, app: ChatApp[Any], url: str
    ) -> None:
        self.kill, self.row, self.stack, self.app, self.url = kill, row, stack, app, url
        self.armed = kill != "never"
        self.killed = False
        self.reached = asyncio.Event()
        self.runtime: Runtime
        if kill == "asking the model again":
            target = 1 if row.steps > 1 else 0
            scripted.gate = lambda index: self._hold() if index == target else _nothing()

    async def open(self) -> Runtime:
        """A runtime on the database, as a (re)started process opens it."""
        self.runtime = await self.stack.enter_async_context(open_runtime(self.app, self.url))
        return self.runtime

    async def drive(self, run_id: str) -> RunStatus:
        if not self.armed:
            return await run_step(self.runtime, run_id)
        sink = _HoldAtResult(self) if self.kill == "at a tool result" else CollectingSink()
        task = asyncio.create_task(run_step(self.runtime, run_id, sink=sink))
        reached = asyncio.create_task(self.reached.wait())
        await asyncio.wait([task, reached], return_when=asyncio.FIRST_COMPLETED)
        reached.cancel()
        if task.done():
            return task.result()  # this run never reached the point: a later one may
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        self.armed, self.killed = False, True
        assert (await self.runtime.db.runs.get(run_id)).status == "queued"
        await self.open()  # the next process continues the run
        return await run_step(self.runtime, run_id)

    async def _hold(self) -> None:
        if self.armed:
            self.reached.set()
            await asyncio.Event().wait()  # until the task is cancelled


class _HoldAtResult(CollectingSink):
    def __init__(self, killer: Killer) -> None:
        super().__init__()
        self.killer = killer

    async def emit(self, event: StreamEvent) -> None:
        await super().emit(event)
        if isinstance(event, ToolResult):
            await self.killer._hold()  # pyright: ignore[reportPrivateUsage]


async def _nothing() -> None:
    return None


async def alone(row: Row, ran: Counter[str]) -> list[ModelMessage]:
    """The row's turns on pydantic-ai alone, saved in its own store; every pending call approved."""
    agent = (row.alone or row.build)(Scripted(row.replies).model(), ran)
    # What a user of pydantic-ai alone passes to pause an agent whose output type lacks the requests.
    output_type: Any = None
    if row.approvals and not names_deferred_requests(spec := agent.output_type):
        output_type = (
            [*spec, DeferredToolRequests] if isinstance(spec, list) else [spec, DeferredToolRequests]
        )
    store = InMemoryConversationStore()
    await store.save(Conversation(conversation_id="alone"))
    for prompt in row.prompts:
        ask: str | None = prompt
        deferred: DeferredToolResults | None = None
        while True:
            conversation = await store.load("alone")
            assert conversation is not None
            async with agent.iter(
                ask,
                conversation=conversation,
                deferred_tool_results=deferred,
                deps=row.deps(),
                output_type=output_type,
            ) as run:
                async for node in run:
                    if Agent.is_model_request_node(node) or Agent.is_call_tools_node(node):
                        async with node.stream(run.ctx) as events:
                            async for _ in events:
                                pass
            assert run.result is not None
            await store.save(run.result)
            output = run.result.output
            if not isinstance(output, DeferredToolRequests):
                break
            ask, deferred = (
                None,
                DeferredToolResults(approvals={call.tool_call_id: True for call in output.approvals}),
            )
    stored = await store.load("alone")
    assert stored is not None
    return stored.messages


def normalized(messages: list[ModelMessage]) -> Any:
    """The messages as JSON, times and run ids left out."""
    return _without(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))


def _without(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: "…" if key in VOLATILE else _details(item) if key == "provider_details" else _without(item)
            for key, item in value.items()  # pyright: ignore[reportUnknownVariableType]
        }
    if isinstance(value, list):
        return [_without(item) for item in value]  # pyright: ignore[reportUnknownVariableType]
    return value


def _details(details: Any) -> Any:
    """A reply's provider details without the name of the agent that gave it (`SAID_BY`): the one
    thing ours stores that pydantic-ai alone does not, as every stored reply names its agent."""
    if not isinstance(details, dict):
        return _without(details)
    rest = {key: item for key, item in details.items() if key != SAID_BY}  # pyright: ignore[reportUnknownVariableType]
    return _without(rest) if rest else None


def stored_results(messages: list[ModelMessage]) -> dict[str, Any]:
    """The content of every tool result the conversation holds, by call id, as JSON."""
    return {
        part.tool_call_id: to_jsonable_python(part.content, fallback=str)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if part.part_kind in ("tool-return", "retry-prompt") and getattr(part, "tool_call_id", None)
    }


def test_the_docs_show_this_table() -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "your-agent.md").read_text()
    start, end = "<!-- the conformance table: tests/test_conformance.py checks it -->\n", "\n<!-- end of"
    shown = page[page.index(start) + len(start) : page.index(end)]
    assert shown == feature_table(), "regenerate the table in docs/your-agent.md from tests/conformance.py"
