"""Deps with a lifetime: a factory that is an async context manager, or an async generator with one
`yield`, is entered before each run and exited after it, however the run ends; `RunScope` says the
run's kind and the user message it answers. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from pydantic_ai import Agent, RunContext, Tool

from agent import ChatApp, RunScope, Runtime, decide, open_runtime, run_step
from store import NewRun, Thread
from stream import CollectingSink, StreamEvent

from .scripted import Calls, Script

pytestmark = pytest.mark.anyio

Style = Literal["context manager", "async generator"]


@dataclass
class Client:
    """A per-run resource, as an HTTP client would be: open while the run runs."""

    scope: RunScope
    open: bool = True


@dataclass
class Lifetimes:
    """Every deps lifetime: the scope it began with, and how it ended (`None`: the run ended well)."""

    began: list[RunScope] = field(default_factory=list[RunScope])
    ended: list[tuple[str, str | None]] = field(default_factory=list[tuple[str, "str | None"]])
    """`(run_id, the exception's type name or None)`, in order."""
    clients: list[Client] = field(default_factory=list[Client])
    hang: asyncio.Event = field(default_factory=asyncio.Event)
    hanging: asyncio.Event = field(default_factory=asyncio.Event)
    fail_exit: bool = False

    def factory(self, style: Style) -> Callable[[RunScope], Any]:
        async def lifetime(scope: RunScope) -> AsyncGenerator[Client]:
            client = Client(scope)
            self.began.append(scope)
            self.clients.append(client)
            try:
                yield client
            except BaseException as error:
                self.ended.append((scope.run_id, type(error).__name__))
                raise
            finally:
                client.open = False
            self.ended.append((scope.run_id, None))
            if self.fail_exit:
                raise RuntimeError("the client did not close")

        return asynccontextmanager(lifetime) if style == "context manager" else lifetime


def the_app(script: Script, lifetimes: Lifetimes, style: Style) -> ChatApp[Client]:
    async def lookup(ctx: RunContext[Client], key: str) -> str:
        """Look `key` up with the run's client."""
        assert ctx.deps.open, "the deps were closed during the run"
        return f"{key}: 42"

    async def slow(ctx: RunContext[Client]) -> str:
        """Take a long time."""
        lifetimes.hanging.set()
        await lifetimes.hang.wait()
        return "done"

    def wire(ctx: RunContext[Client], cents: int) -> str:
        """Wire money."""
        return f"wired {cents}"

    agent = Agent(
        script.model(),
        deps_type=Client,
        tools=[lookup, slow, Tool(wire, requires_approval=True)],
        name="lifetimes",
    )
    return ChatApp(agent=agent, deps=lifetimes.factory(style))


@pytest.fixture(params=["context manager", "async generator"])
def style(request: pytest.FixtureRequest) -> Style:
    return request.param


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as opened:
        yield opened


async def opened(stack: AsyncExitStack, app: ChatApp[Any], url: str) -> Runtime:
    return await stack.enter_async_context(open_runtime(app, url))


async def new_thread(runtime: Runtime) -> Thread:
    return await runtime.db.threads.create(user_id="alice", title="lifetimes")


async def test_a_completed_run_has_its_deps_open_throughout_and_closed_after(
    style: Style, stack: AsyncExitStack, database_url: str
) -> None:
    lifetimes = Lifetimes()
    runtime = await opened(
        stack, the_app(Script([Calls([("lookup", {"key": "k"})]), "Done."]), lifetimes, style), database_url
    )
    thread = await new_thread(runtime)
    run = (
        await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Look k up"))
    ).run
    assert await run_step(runtime, run.run_id) == "completed"
    assert lifetimes.ended == [(run.run_id, None)]
    [scope] = lifetimes.began
    assert (scope.kind, scope.message, scope.run_id, scope.attempt) == ("message", "Look k up", run.run_id, 1)
    assert not lifetimes.clients[0].open


async def test_a_pause_closes_the_deps_and_the_resume_opens_its_own(
    style: Style, stack: AsyncExitStack, database_url: str
) -> None:
    lifetimes = Lifetimes()
    app = the_app(Script([Calls([("wire", {"cents": 500})]), "Wired."]), lifetimes, style)
    runtime = await opened(stack, app, database_url)
    thread = await new_thread(runtime)
    run = (
        await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Wire 5"))
    ).run
    assert await run_step(runtime, run.run_id) == "awaiting_approval"
    assert lifetimes.ended == [(run.run_id, None)]
    [pending] = await runtime.db.approvals.list(thread_id=thread.thread_id, status="pending")
    decision = await decide(
        runtime.db, thread.thread_id, pending.tool_call_id, decision="approved", decided_by="bob"
    )
    assert decision.resume_run_id is not None
    assert await run_step(runtime, decision.resume_run_id) == "completed"
    assert lifetimes.ended == [(run.run_id, None), (decision.resume_run_id, None)]
    assert [(s.kind, s.message) for s in lifetimes.began] == [("message", "Wire 5"), ("resume", None)]


async def test_a_failed_run_closes_its_deps_with_the_error(
    style: Style, stack: AsyncExitStack, database_url: str
) -> None:
    lifetimes = Lifetimes()
    runtime = await opened(
        stack, the_app(Script([ValueError("a malformed response")]), lifetimes, style), database_url
    )
    thread = await new_thread(runtime)
    run = (await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Hi"))).run
    assert await run_step(runtime, run.run_id) == "failed"
    assert lifetimes.ended == [(run.run_id, "ValueError")]
    assert not lifetimes.clients[0].open


async def test_a_cancelled_run_closes_its_deps_and_its_recovery_opens_new_ones(
    style: Style, stack: AsyncExitStack, database_url: str
) -> None:
    lifetimes = Lifetimes()
    app = the_app(Script([Calls([("slow", {})]), "Done."]), lifetimes, style)
    runtime = await opened(stack, app, database_url)
    thread = await new_thread(runtime)
    run = (
        await runtime.db.runs.queue(
            NewRun(thread_id=thread.thread_id, kind="message", content="Take your time")
        )
    ).run
    task = asyncio.create_task(run_step(runtime, run.run_id))
    await asyncio.wait_for(lifetimes.hanging.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert lifetimes.ended == [(run.run_id, "CancelledError")]
    assert not lifetimes.clients[0].open
    lifetimes.hang.set()
    assert await run_step(await opened(stack, app, database_url), run.run_id) == "completed"
    assert lifetimes.ended == [(run.run_id, "CancelledError"), (run.run_id, None)]
    # The continuation answers the same message, and says it recovers.
    assert [(s.kind, s.message, s.attempt) for s in lifetimes.began] == [
        ("message", "Take your time", 1),
        ("recover", "Take your time", 2),
    ]


async def test_a_stopping_worker_closes_the_deps_of_the_run_it_puts_back(
    style: Style, stack: AsyncExitStack, database_url: str
) -> None:
    lifetimes = Lifetimes()
    runtime = await opened(
        stack, the_app(Script([Calls([("lookup", {"key": "k"})]), "Done."]), lifetimes, style), database_url
    )
    thread = await new_thread(runtime)
    run = (
        await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Look k up"))
    ).run

    class StopAtTheCall(CollectingSink):
        async def emit(self, event: StreamEvent) -> None:
            await super().emit(event)
            if event.type == "tool_call":
                runtime.stopping.set()

    assert await run_step(runtime, run.run_id, sink=StopAtTheCall()) == "queued"
    assert lifetimes.ended == [(run.run_id, "_Stopped")]
    assert not lifetimes.clients[0].open


async def test_a_regenerated_reply_says_so_and_answers_the_same_message(
    style: Style, stack: AsyncExitStack, database_url: str
) -> None:
    lifetimes = Lifetimes()
    runtime = await opened(stack, the_app(Script(["Hello.", "Hi again."]), lifetimes, style), database_url)
    thread = await new_thread(runtime)
    first = (
        await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Hi"))
    ).run
    assert await run_step(runtime, first.run_id) == "completed"
    again = (
        await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="regenerate", content="Hi"))
    ).run
    assert await run_step(runtime, again.run_id) == "completed"
    assert [(s.kind, s.message) for s in lifetimes.began] == [("message", "Hi"), ("regenerate", "Hi")]


async def test_a_failing_exit_after_the_run_ended_is_logged_not_raised(
    style: Style, stack: AsyncExitStack, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    lifetimes = Lifetimes(fail_exit=True)
    runtime = await opened(stack, the_app(Script(["Hello."]), lifetimes, style), database_url)
    thread = await new_thread(runtime)
    run = (await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Hi"))).run
    assert await run_step(runtime, run.run_id) == "completed"
    assert (await runtime.db.runs.get(run.run_id)).status == "completed"
    assert f"the deps of run {run.run_id} failed to close" in caplog.text
