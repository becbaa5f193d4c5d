"""What the step tests share: a runtime on a test database, as one server process holds it.

It serves any app: the core tests' own (`core_app`, opened by the `core_factory` fixture) or the demo
shop (`app_factory`, for the shop's tests).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest

from agent import Runtime, run_step
from store import Database, NewRun, Thread
from store.schema import RunRow, now_utc
from stream import CollectingSink, StreamEvent, event_from_data

__all__ = ("App", "AppFactory", "Crash", "CrashingSink", "crash_then_recover", "shapes")


@dataclass
class App:
    """A runtime on the test's database, as one server process would hold it."""

    runtime: Runtime

    @property
    def db(self) -> Database:
        return self.runtime.db

    async def thread(self, user_id: str = "alice") -> Thread:
        return await self.db.threads.create(user_id=user_id, title="test")

    async def send(self, thread: Thread, content: str, *, sink: CollectingSink | None = None) -> str:
        run = (
            await self.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content=content))
        ).run
        await run_step(self.runtime, run.run_id, sink=sink)
        return run.run_id

    async def pending(self, thread: Thread) -> list[str]:
        return [
            a.tool_call_id for a in await self.db.approvals.list(thread_id=thread.thread_id, status="pending")
        ]

    async def log(self, thread: Thread) -> list[StreamEvent]:
        return [event_from_data(e.type, e.data) for e in await self.db.events.read(thread.thread_id)]

    async def messages(self, thread: Thread) -> list[ModelMessage]:
        conversation = await self.db.conversations.load(thread.thread_id)
        return [] if conversation is None else conversation.messages


AppFactory = Callable[[], Awaitable[App]]


def shapes(messages: list[ModelMessage]) -> list[str]:
    """The conversation's messages as `request: part kinds` / `response: part kinds` lines."""
    lines: list[str] = []
    for message in messages:
        kinds = ", ".join(
            f"{part.part_kind}({getattr(part, 'tool_name', '')})"
            if hasattr(part, "tool_name")
            else part.part_kind
            for part in message.parts
        )
        lines.append(f"{'request' if isinstance(message, ModelRequest) else 'response'}: {kinds}")
    return lines


class Crash(BaseException):
    """Stands for the process dying: nothing after it runs, no handler sees it."""


class CrashingSink(CollectingSink):
    """Dies at a chosen point of the run: at its `at_flush`-th checkpoint or on an event it matches."""

    def __init__(
        self, *, at_flush: int | None = None, on: Callable[[StreamEvent], bool] | None = None
    ) -> None:
        super().__init__()
        self.at_flush, self.on, self.flushes = at_flush, on, 0

    async def emit(self, event: StreamEvent) -> None:
        await super().emit(event)
        if self.on is not None and self.on(event):
            raise Crash

    async def flush(self) -> None:
        await super().flush()
        self.flushes += 1
        if self.flushes == self.at_flush:
            raise Crash


async def crash_then_recover(open_app: Callable[[], Awaitable[App]], run_id: str, sink: CrashingSink) -> App:
    """Drive `run_id` until `sink` crashes it, then recover it in a new process once its lease lapses."""
    crashed = await open_app()
    with pytest.raises(Crash):
        await run_step(crashed.runtime, run_id, sink=sink)
    assert (await crashed.db.runs.get(run_id)).status == "running"
    # After the restart: once the dead process's lease lapses, the new one takes the run over.
    recovered = await open_app()
    assert await run_step(recovered.runtime, run_id) == "running"  # not while the lease holds
    async with recovered.db.engine.begin() as connection:
        await connection.execute(
            RunRow.__table__.update().values(lease_expires_at=now_utc() - timedelta(seconds=1))
        )
    assert await run_step(recovered.runtime, run_id) in {"completed", "awaiting_approval"}
    return recovered
