"""The terminal face of a chat: a sink that prints a run's events, and a stored conversation's lines.

On a terminal (a TTY) it uses `rich`: colours, a spinner while the model thinks or a tool runs,
replies streamed as they come then shown again as rendered markdown, and tool results wrapped at
word boundaries. Anywhere else (a pipe, a file) it prints plain lines: text as it streams, one line
per tool step, results cut short at a word.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_core import to_jsonable_python
from rich.console import Console
from rich.markdown import Markdown
from rich.padding import Padding
from rich.status import Status
from rich.table import Table
from rich.text import Text

from agent import SAID_BY, attachment_of
from stream import (
    AgentChanged,
    ApprovalDecided,
    ApprovalEscalated,
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

__all__ = (
    "ASSISTANT",
    "USER",
    "TerminalSink",
    "call_text",
    "conversation_lines",
    "field_text",
    "fields_line",
    "refusal",
    "short",
    "speaker",
    "type_label",
)

USER = "you> "
ASSISTANT = "assistant> "
_INDENT = "    "
"""How much deeper each level of delegated agents is printed."""


def speaker(agent: str | None) -> str:
    """The prefix of a reply: the agent's name when the server named one, else `assistant> `."""
    return ASSISTANT if agent is None else f"{agent}> "


_SHORT = 100
_LONG = 600
"""How much of a tool's result a terminal shows, wrapped over several lines."""


def call_text(tool_name: str, args: Mapping[str, object]) -> str:
    """A tool call as Python would write it: `issue_refund(order_id='ORD-5678', amount=99.98)`."""
    return f"{tool_name}({', '.join(f'{name}={value!r}' for name, value in args.items())})"


def short(content: object, limit: int = _SHORT) -> str:
    """A JSON value on one line, cut to `limit` characters, at a word when there is one near the end."""
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit * 2 // 3:
        cut = cut[:space]
    return cut + "…"


def type_label(type_name: str) -> str:
    """A type's name as words: `NoFlightFound` → "No flight found"."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", type_name.replace("_", " "))
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", spaced)
    words = spaced.split()
    text = " ".join(w if i == 0 or w.isupper() else w.lower() for i, w in enumerate(words))
    return text[:1].upper() + text[1:]


def field_text(value: object) -> str:
    """A field's value on one line: text as is, lists of plain values joined, anything nested as JSON."""
    match value:
        case None:
            return "—"
        case str():
            return value
        case bool() | int() | float():
            return json.dumps(value)
        case list():
            items: list[object] = list(value)  # pyright: ignore[reportUnknownArgumentType]  # a JSON array
            if all(not isinstance(item, dict | list) for item in items):
                return ", ".join(field_text(item) for item in items)
            return json.dumps(items, ensure_ascii=False, default=str)
        case _:
            return json.dumps(value, ensure_ascii=False, default=str)


def fields_line(fields: Mapping[str, object]) -> str:
    """`key: value · key: value`, for a short object (an approval's metadata)."""
    return " · ".join(f"{key}: {field_text(value)}" for key, value in fields.items())


def refusal(content: object) -> str | None:
    """Why a tool that ran says it did not do what was asked (its business rules refused), if it does."""
    if not isinstance(content, dict):
        return None
    items: list[tuple[object, object]] = list(content.items())  # pyright: ignore[reportUnknownArgumentType]  # a JSON object
    fields = {str(key): value for key, value in items}
    error = fields.get("error")
    if isinstance(error, str):
        return error
    if any(fields.get(key) is False for key in ("accepted", "cancelled", "ok", "success", "allowed")):
        message = fields.get("message")
        return message if isinstance(message, str) else "refused"
    return None


class TerminalSink:
    """Prints the events of a run to a terminal as they come (a `stream.Sink`)."""

    def __init__(
        self,
        out: TextIO | None = None,
        *,
        terminal: bool | None = None,
        width: int | None = None,
        named: bool = True,
    ) -> None:
        """`terminal` forces the terminal's rendering on (or off); `width` fixes its width (for tests);
        `named`: the run's own replies start with their agent's name (an app of several agents), else
        with `assistant> ` (a delegated agent's are always named)."""
        self._out = sys.stdout if out is None else out
        self._console = Console(
            file=self._out, highlight=False, emoji=False, force_terminal=terminal, width=width
        )
        self.rich = self._console.is_terminal
        """Colours, a spinner and markdown: the output is a terminal."""
        self._open_part: str | None = None
        """The text part being printed, whose line is not finished yet."""
        self._streamed = ""
        self._speaker = ASSISTANT
        """The prefix of the reply being printed."""
        self.named = named
        self._depths: dict[str, int] = {}
        """How deep each tool call is: 0 for the run's own, 1 inside a call that delegated, and so on."""
        self._status: Status | None = None

    # -- the spinner ------------------------------------------------------------------------------

    def thinking(self, what: str = "Thinking…") -> None:
        """Show a spinner until the next output (on a terminal)."""
        if not self.rich:
            return
        self.stop_spinner()
        self._status = self._console.status(Text(what, style="dim"), spinner="dots")
        self._status.start()

    def stop_spinner(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    # -- the sink ---------------------------------------------------------------------------------

    def _depth(self, event: StreamEvent) -> int:
        parent = event.parent_tool_call_id
        return 0 if parent is None else self._depths.get(parent, 0) + 1

    async def emit(self, event: StreamEvent) -> None:
        """Print the event; a delegated agent's, indented under the call that delegated, its text whole."""
        depth = self._depth(event)
        if depth:
            self._delegated(event, _INDENT * depth)
            return
        match event:
            case TextDelta(part_id=part_id, delta=delta):
                self.stop_spinner()
                if self._open_part != part_id:
                    self._end_line()
                    self._speaker = speaker(event.agent if self.named else None)
                    self._write(self._speaker, "bold cyan")
                    self._open_part = part_id
                    self._streamed = self._speaker
                self._write(delta)
                self._streamed += delta
                self._out.flush()
            case TextDone(part_id=part_id, text=text):
                self.stop_spinner()
                if self._open_part != part_id and text:
                    # Nothing of it streamed (an empty first delta): print it whole.
                    self._end_line()
                    self._speaker = speaker(event.agent if self.named else None)
                    self._write(self._speaker, "bold cyan")
                    self._write(text)
                    self._open_part = part_id
                    self._streamed = self._speaker + text
                self._finish_reply(text)
            case TextWithdrawn(replacement=replacement):
                self._end_line()
                self._line("(the reply above was withdrawn)", "yellow")
                self._speaker = speaker(event.agent if self.named else None)
                self._reply(replacement)
            case ToolCall(tool_call_id=tool_call_id, tool_name=tool_name, args=args):
                self._depths[tool_call_id] = 0
                self._line(f"→ {call_text(tool_name, args)}", "cyan")
                self.thinking("Working…")
            case ToolResult(tool_name=tool_name, outcome=outcome, content=content):
                self._tool_result(tool_name, outcome, content)
                self.thinking()
            case RunStarted(kind=kind):
                if kind == "recover":
                    self._line("(continuing an interrupted run)", "yellow")
                self.thinking()
            case ToolOutcomeUnknown(tool_name=tool_name):
                self._line(
                    f"(the outcome of {tool_name} is unknown: its process stopped; decide whether it runs again)",
                    "yellow",
                )
            case GuardrailTripped(guardrail=guardrail, stage=stage):
                self._line(f"(guardrail {guardrail!r} stopped the {stage})", "yellow")
            case AgentChanged(agent=agent):
                self._line(f"(the {agent} agent answers from now on)", "yellow")
            case ApprovalEscalated(reviewers=reviewers, expires_at=expires_at):
                until = f" until {expires_at}" if expires_at else ""
                self._line(f"(the decision went to a reviewer with the role {reviewers!r}{until})", "yellow")
            case RunFinished(status="completed", output=output, output_type=str() as output_type):
                self.stop_spinner()
                self._output(output, output_type)
            case RunFinished(status="cancelled"):
                self._line("(stopped: the reply above may be incomplete)", "yellow")
            case RunFinished(status="failed" | "blocked" as status, error=error):
                self._line(
                    f"(the run {status}{f': {error}' if error else ''})",
                    "red" if status == "failed" else "yellow",
                )
            case UserMessage() | ApprovalRequired() | ApprovalDecided() | RunFinished():
                self.stop_spinner()  # the user typed the message; the chat asks for approvals itself

    async def flush(self) -> None:
        """Flush the terminal."""
        self._out.flush()

    def _delegated(self, event: StreamEvent, indent: str) -> None:
        """A delegated agent's event: its calls, results and whole replies, indented."""
        match event:
            case ToolCall(tool_call_id=tool_call_id, tool_name=tool_name, args=args):
                self._depths[tool_call_id] = len(indent) // len(_INDENT)
                self._line(f"{indent}→ {call_text(tool_name, args)}", "cyan")
                self.thinking("Working…")
            case ToolResult(tool_name=tool_name, outcome=outcome, content=content):
                self._tool_result(tool_name, outcome, content, indent)
                self.thinking("Working…")
            case TextDone(text=text) if text:
                self._line(indent + speaker(event.agent) + text.replace("\n", "\n" + indent + _INDENT), "dim")
            case TextWithdrawn(replacement=replacement):
                self._line(f"{indent}(withdrawn) {speaker(event.agent)}{replacement}", "dim")
            case _:
                pass  # its text streams as a whole at its end; the run's own events say the rest

    def say(self, text: str, style: str | None = None) -> None:
        """A line of the chat's own (a notice, an error)."""
        self._line(text, style)

    # -- printing ---------------------------------------------------------------------------------

    def _tool_result(self, tool_name: str, outcome: str, content: object, indent: str = "") -> None:
        refused = refusal(content) if outcome == "success" else None
        shown = "refused" if refused is not None else outcome
        label = tool_name if shown == "success" else f"{tool_name} {shown}"
        style = {"success": "green", "refused": "yellow"}.get(shown, "red")
        if not self.rich:
            self._line(f"{indent}← {label}: {short(content)}")
            return
        self.stop_spinner()
        self._end_line()
        line = Text(f"{indent}← ", style=style)
        line.append(label, style=f"bold {style}")
        line.append(": ")
        line.append(short(content, _LONG), style="dim")
        # rich wraps it at word boundaries (a word longer than a line is folded).
        self._console.print(line, overflow="fold")

    def _output(self, output: object, output_type: str) -> None:
        """A structured output: a table of its fields on a terminal, `key: value` lines elsewhere."""
        self._end_line()
        rows: list[tuple[str, str]]
        if isinstance(output, dict):
            items: list[tuple[object, object]] = list(output.items())  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType]  # a JSON object
            rows = [(str(key), field_text(value)) for key, value in items]
        elif isinstance(output, list):
            rows = [(str(index + 1), field_text(item)) for index, item in enumerate(output)]  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]
        else:
            rows = [("value", field_text(output))]
        title = type_label(output_type) + ("" if rows else " (no details)")
        if not self.rich:
            self._line(ASSISTANT + title)
            for key, value in rows:
                self._line(f"  {key}: {value}")
            return
        heading = Text(ASSISTANT, style="bold cyan")
        heading.append(title, style="bold")
        self._console.print(heading, overflow="fold")
        if rows:
            table = Table.grid(padding=(0, 2))
            table.add_column(style="dim", no_wrap=True)
            table.add_column(overflow="fold")
            for key, value in rows:
                table.add_row(key, value)
            self._console.print(Padding(table, (0, 0, 0, len(ASSISTANT))))
        self._out.flush()

    def _finish_reply(self, text: str) -> None:
        """The streamed part is complete: on a terminal, show it again as rendered markdown."""
        if self._open_part is None:
            return
        if not self.rich:
            self._end_line()
            return
        rows = _rows(self._streamed, self._console.width)
        # Back to the reply's first row, clear what was streamed, and print it rendered.
        self._out.write("\r" + (f"\x1b[{rows - 1}A" if rows > 1 else "") + "\x1b[J")
        self._open_part = None
        self._streamed = ""
        self._reply(text)

    def _reply(self, text: str) -> None:
        if not self.rich:
            self._line(self._speaker + text)
            return
        self.stop_spinner()
        grid = Table.grid()
        grid.add_column(no_wrap=True)
        grid.add_column()
        grid.add_row(Text(self._speaker, style="bold cyan"), Markdown(text))
        self._console.print(grid)

    def _end_line(self) -> None:
        if self._open_part is not None:
            self._out.write("\n")
            self._open_part = None
            self._streamed = ""

    def _line(self, text: str, style: str | None = None) -> None:
        self.stop_spinner()
        self._end_line()
        if self.rich:
            self._console.print(Text(text, style=style or ""), overflow="fold")
        else:
            self._out.write(text + "\n")
        self._out.flush()

    def _write(self, text: str, style: str | None = None) -> None:
        if self.rich and style:
            self._console.print(Text(text, style=style), end="")
        else:
            self._out.write(text)


def _rows(text: str, width: int) -> int:
    """How many terminal rows `text` took as it was written, lines wrapping at `width` characters."""
    return sum(max(1, math.ceil(len(line) / max(width, 1))) for line in text.split("\n"))


def conversation_lines(messages: Sequence[ModelMessage], *, named: bool = True) -> list[str]:
    """A stored conversation as the terminal showed it: user, assistant, tool calls and results."""
    lines: list[str] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and not isinstance(part.content, str):
                    files = [a for a in map(attachment_of, part.content) if a is not None]
                    texts = [item for item in part.content if isinstance(item, str)]
                    lines.append(USER + (" ".join(texts) if files else short(part.content)))
                    lines.extend(f"  (attached {a.name}, {a.media_type}, {a.size} bytes)" for a in files)
                elif isinstance(part, UserPromptPart):
                    lines.append(USER + str(part.content))
                elif isinstance(part, ToolReturnPart):
                    content = to_jsonable_python(part.content, fallback=str)
                    refused = refusal(content) if part.outcome == "success" else None
                    label = (
                        part.tool_name
                        if part.outcome == "success" and refused is None
                        else f"{part.tool_name} {'refused' if refused else part.outcome}"
                    )
                    lines.append(f"← {label}: {short(content)}")
        else:
            said = speaker(_agent_of(message) if named else None)
            for part in message.parts:
                if isinstance(part, TextPart) and part.content:
                    lines.append(said + part.content)
                elif isinstance(part, ToolCallPart):
                    lines.append(f"→ {call_text(part.tool_name, part.args_as_dict())}")
        if isinstance(message, ModelResponse) and message.state == "interrupted":
            lines.append("(stopped)")
    return lines


def _agent_of(message: ModelResponse) -> str | None:
    """The agent that gave a stored reply, when the server noted it (`SAID_BY` in its provider details)."""
    agent = (message.provider_details or {}).get(SAID_BY)
    return agent if isinstance(agent, str) else None
