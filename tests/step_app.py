"""What the step tests share: a runtime on a test database, as one server process holds it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pydantic_ai.messages import ModelMessage, ModelRequest

from agent import Runtime, run_step
from agent.demo import BusinessData
from store import Database, Thread
from stream import CollectingSink, StreamEvent, event_from_data

__all__ = ("App", "AppFactory", "refunded_cents", "shapes")


@dataclass
class App:
    """A runtime on the test's database, as one server process would hold it."""

    runtime: Runtime

    @property
    def db(self) -> Database:
        return self.runtime.db

    @property
    def business(self) -> BusinessData:
        """The demo shop's data, when the runtime serves the shop."""
        return BusinessData(self.runtime.db.engine)

    async def thread(self, user_id: str = "alice") -> Thread:
        return await self.db.threads.create(user_id=user_id, title="test")

    async def send(self, thread: Thread, content: str, *, sink: CollectingSink | None = None) -> str:
        run, _ = await self.db.runs.create_message_run(thread.thread_id, content=content)
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


async def refunded_cents(app: App, order_id: str) -> int:
    order = await app.business.get_order(order_id)
    assert order is not None
    return order.refunded_cents
