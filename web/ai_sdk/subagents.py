"""A delegated agent's events in the UI message stream: nested under the call that delegated.

As the AI SDK shows sub-agents, the outermost call's part gets *preliminary* outputs
(`tool-output-available` with `preliminary: true`): each one the whole nested view so far, a message
of the delegated agent, `{"agent", "parts": [...]}`, whose parts are text parts and tool parts, a tool
part that delegated again holding its own agent's view as its output. The call's real result
replaces it when the call returns. A delegated call that waits for the client's decision is also
put at the top of the message, in a step of its own, so `tool-approval-request` can name it (the
AI SDK answers approvals of the message's own tool parts only). `docs/clients.md` shows the shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.ui.vercel_ai.response_types import BaseChunk, ToolOutputAvailableChunk

from stream import StreamEvent, TextDelta, TextDone, TextWithdrawn, ToolCall, ToolResult

__all__ = ("SubAgents",)

_STATES = {"success": "output-available", "denied": "output-denied", "failed": "output-error"}


@dataclass
class _View:
    """What one delegated agent did inside the call that delegated to it."""

    agent: str | None
    parts: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])


@dataclass
class SubAgents:
    """The nested views of one response's delegated agents, by the call that delegated."""

    views: dict[str, _View] = field(default_factory=dict[str, _View])
    parents: dict[str, str] = field(default_factory=dict[str, str])
    """The call each delegated call was made in."""
    texts: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    tools: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    sent: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    """The last preliminary output sent, by call."""

    def root(self, tool_call_id: str) -> str:
        """The outermost call `tool_call_id` runs in (itself when it is the message's own)."""
        while tool_call_id in self.parents:
            tool_call_id = self.parents[tool_call_id]
        return tool_call_id

    def seen(self, tool_call_id: str) -> bool:
        """Whether this response saw the delegated call made."""
        return tool_call_id in self.tools

    def encode(self, event: StreamEvent, parent: str, own: set[str]) -> list[BaseChunk]:
        """The chunks of a delegated agent's `event`: the outermost call's preliminary output.

        `own`: the message's own calls this response made. A response that continues a message
        after a decision did not see the chain of calls the resumed agents run in: it sends no
        preliminary output rather than one for a call that may not be the message's.
        """
        view = self.views.setdefault(parent, _View(event.agent))
        view.agent = view.agent or event.agent
        match event:
            case TextDelta(part_id=part_id, delta=delta) if delta:
                self._text(view, part_id)["text"] += delta
            case TextDone(part_id=part_id, text=text) | TextWithdrawn(part_id=part_id, replacement=text):
                self._text(view, part_id)["text"] = text
            case ToolCall(tool_call_id=tool_call_id, tool_name=tool_name, args=args):
                self.parents[tool_call_id] = parent
                part = {"type": f"tool-{tool_name}", "toolCallId": tool_call_id, "state": "input-available"}
                self.tools[tool_call_id] = part | {"input": args}
                view.parts.append(self.tools[tool_call_id])
            case ToolResult(tool_call_id=tool_call_id, tool_name=tool_name, outcome=outcome, content=content):
                self.parents.setdefault(tool_call_id, parent)
                part = self.tools.get(tool_call_id)
                if part is None:  # made in an earlier response (it waited for a decision)
                    part = self.tools[tool_call_id] = {
                        "type": f"tool-{tool_name}",
                        "toolCallId": tool_call_id,
                    }
                    view.parts.append(part)
                part["state"] = _STATES[outcome]
                part["output" if outcome == "success" else "errorText"] = content
            case _:
                return []
        root = self.root(parent)
        output = self.snapshot(root)
        if root not in own or self.sent.get(root) == output:
            return []
        self.sent[root] = output
        return [ToolOutputAvailableChunk(tool_call_id=root, output=output, preliminary=True)]

    def snapshot(self, tool_call_id: str) -> dict[str, Any]:
        """The nested view of the call `tool_call_id` as JSON: its agent's parts, and theirs within."""
        view = self.views.get(tool_call_id, _View(None))
        parts: list[dict[str, Any]] = []
        for part in view.parts:
            call = part.get("toolCallId")
            if call in self.views and part.get("state") == "input-available":
                part = {
                    **part,
                    "state": "output-available",
                    "output": self.snapshot(call),
                    "preliminary": True,
                }
            parts.append(dict(part))
        return {"agent": view.agent, "parts": parts}

    def _text(self, view: _View, part_id: str) -> dict[str, Any]:
        part = self.texts.get(part_id)
        if part is None:
            part = self.texts[part_id] = {"type": "text", "text": ""}
            view.parts.append(part)
        return part
