"""One agent run's pydantic-ai events as stream events, for the top run and every delegated run alike.

Text goes out through the run's output guardrails (`agent.withdrawals.OutputGuard`), which hold back
what could still trip one; tool calls and results go out as they come. Every event is made with its
tags (`run_id`, `agent`, and inside a delegated run `parent_tool_call_id`), so that no sink has to
copy it to say who produced it.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic_ai.messages import (
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolResultEvent,
)
from pydantic_core import to_jsonable_python

from stream import Sink, ToolCall, ToolResult

from .approvals import call_args
from .withdrawals import OutputGuard

__all__ = ("RunEvents",)


class RunEvents:
    """Translates the events of one agent run; `part_id(index)` names a text part of the current response."""

    def __init__(self, out: Sink, guard: OutputGuard, part_id: Callable[[int], str]) -> None:
        self.out = out
        self.guard = guard
        self.part_id = part_id

    async def model_event(self, event: object) -> None:
        """An event of a model response as it streams."""
        tags = self.guard.tags
        match event:
            case PartStartEvent(index=index, part=TextPart(content=content)) if content:
                await self.guard.text_delta(self.part_id(index), content)
            case PartDeltaEvent(index=index, delta=TextPartDelta(content_delta=delta)) if delta:
                await self.guard.text_delta(self.part_id(index), delta)
            case PartEndEvent(index=index, part=TextPart(content=content)):
                await self.guard.text_done(self.part_id(index), content)
            case PartEndEvent(part=ToolCallPart() as call):
                await self.out.emit(
                    ToolCall(
                        **tags, tool_call_id=call.tool_call_id, tool_name=call.tool_name, args=call_args(call)
                    )
                )
            case _:
                pass

    async def tool_result(self, event: ToolResultEvent) -> None:
        """A tool call ended (a function tool's, or an output tool's)."""
        part = event.part
        outcome = (
            "success" if part.outcome == "success" else "denied" if part.outcome == "denied" else "failed"
        )
        await self.out.emit(
            ToolResult(
                **self.guard.tags,
                tool_call_id=part.tool_call_id,
                tool_name=part.tool_name,
                outcome=outcome,
                content=to_jsonable_python(part.content, fallback=str),
            )
        )
