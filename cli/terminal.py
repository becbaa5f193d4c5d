"""The terminal face of a chat: a sink that prints a run's events, and a stored conversation's lines.

Text is printed as it streams, without a newline until its part is done; everything else is one
line. Tool results are cut short: the reply that follows says what they mean.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_core import to_jsonable_python

from stream import (
    ApprovalDecided,
    ApprovalRequired,
    GuardrailTripped,
    RunFinished,
    RunStarted,
    StreamEvent,
    TextDelta,
    TextDone,
    TextWithdrawn,
    ToolCall,
    ToolOutcomeUnknown,
    ToolResult,
    UserMessage,
)

__all__ = ("ASSISTANT", "USER", "TerminalSink", "call_text", "conversation_lines", "short")

USER = "you> "
ASSISTANT = "assistant> "
_SHORT = 100


def call_text(tool_name: str, args: Mapping[str, object]) -> str:
    """A tool call as Python would write it: `issue_refund(order_id='ORD-5678', amount=99.98)`."""
    return f"{tool_name}({', '.join(f'{name}={value!r}' for name, value in args.items())})"


def short(content: object, limit: int = _SHORT) -> str:
    """A JSON value on one line, cut to `limit` characters."""
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class TerminalSink:
    """Prints the events of a run to a terminal as they come (a `stream.Sink`)."""

    def __init__(self, out: TextIO | None = None) -> None:
        self._out = sys.stdout if out is None else out
        self._open_part: str | None = None
        """The text part being printed, whose line is not finished yet."""

    async def emit(self, event: StreamEvent) -> None:
        """Print the event."""
        match event:
            case TextDelta(part_id=part_id, delta=delta):
                if self._open_part != part_id:
                    self._end_line()
                    self._write(ASSISTANT)
                    self._open_part = part_id
                self._write(delta)
                self._out.flush()
            case TextDone(part_id=part_id, text=text):
                if self._open_part != part_id and text:
                    # Nothing of it streamed (an empty first delta): print it whole.
                    self._end_line()
                    self._write(ASSISTANT + text)
                    self._open_part = part_id
                self._end_line()
            case TextWithdrawn(replacement=replacement):
                self._end_line()
                self._line("(the reply above was withdrawn)")
                self._line(ASSISTANT + replacement)
            case ToolCall(tool_name=tool_name, args=args):
                self._line(f"→ {call_text(tool_name, args)}")
            case ToolResult(tool_name=tool_name, outcome="success", content=content):
                self._line(f"← {tool_name}: {short(content)}")
            case ToolResult(tool_name=tool_name, outcome=outcome, content=content):
                self._line(f"← {tool_name} {outcome}: {short(content)}")
            case ToolOutcomeUnknown(tool_name=tool_name):
                self._line(f"(! {tool_name} was started before and never finished: its outcome is unknown)")
            case RunStarted(kind="recover"):
                self._line("(continuing an interrupted run)")
            case GuardrailTripped(guardrail=guardrail, stage=stage):
                self._line(f"(guardrail {guardrail!r} stopped the {stage})")
            case RunFinished(status="failed" | "blocked" | "cancelled" as status, error=error):
                self._line(f"(the run {status}{f': {error}' if error else ''})")
            case RunStarted() | UserMessage() | ApprovalRequired() | ApprovalDecided() | RunFinished():
                pass  # the user typed the message; the chat asks for approvals itself

    async def flush(self) -> None:
        """Flush the terminal."""
        self._out.flush()

    def _end_line(self) -> None:
        if self._open_part is not None:
            self._write("\n")
            self._open_part = None

    def _line(self, text: str) -> None:
        self._end_line()
        self._write(text + "\n")
        self._out.flush()

    def _write(self, text: str) -> None:
        self._out.write(text)


def conversation_lines(messages: Sequence[ModelMessage]) -> list[str]:
    """A stored conversation as the terminal showed it: user, assistant, tool calls and results."""
    lines: list[str] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    content = part.content if isinstance(part.content, str) else short(part.content)
                    lines.append(USER + content)
                elif isinstance(part, ToolReturnPart):
                    label = (
                        part.tool_name if part.outcome == "success" else f"{part.tool_name} {part.outcome}"
                    )
                    lines.append(f"← {label}: {short(to_jsonable_python(part.content, fallback=str))}")
        else:
            for part in message.parts:
                if isinstance(part, TextPart) and part.content:
                    lines.append(ASSISTANT + part.content)
                elif isinstance(part, ToolCallPart):
                    lines.append(f"→ {call_text(part.tool_name, part.args_as_dict())}")
    return lines
