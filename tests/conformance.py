"""The pydantic-ai conformance table: one small agent per feature, served by durable-chat as written.

`tests/test_conformance.py` drives every row through its turns (and a pause and an approval where it
has a tool that needs one), uninterrupted and killed in the middle, on SQLite and PostgreSQL, and
checks the stored conversation against what pydantic-ai alone makes of the same script.
`docs/your-agent.md` shows the table (`feature_table()`), checked by `tests/test_docs.py`.

Adding a row is one entry in `ROWS`: what it shows, the agent (built on the scripted model it is
given, its tools counting their runs in `ran`), the model's replies in order, and its prompts.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_ai import (
    Agent,
    ApprovalRequired,
    DeferredToolRequests,
    FunctionToolset,
    ModelRetry,
    NativeOutput,
    PromptedOutput,
    RunContext,
    TextOutput,
    Tool,
    ToolOutput,
    WrapperToolset,
)
from pydantic_ai.capabilities import Hooks, PrepareTools, ProcessHistory
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool

__all__ = ("MCP_SERVER", "ROWS", "Row", "Scripted", "feature_table")

Reply = str | list[tuple[str, dict[str, Any]]]
"""A model's response: a text (streamed word by word), or tool calls (in one response)."""

MCP_SERVER = Path(__file__).with_name("mcp_server.py")
"""A FastMCP server over stdio, for the MCP row: `lookup_weather(city)`."""


@dataclass
class Scripted:
    """A model that plays `replies` in order, one per request it has not answered yet.

    A request is known by what it carries (its parts' kinds, call ids and contents, not its time):
    a request sent again (a crash during the model call, then the recovery) gets the same reply, as
    a deterministic provider would give. Call ids are `call_<reply>_<n>`. `gate`, when set, is
    awaited with a reply's index before that reply is given (a test holds the model there).
    """

    replies: list[Reply]
    gate: Callable[[int], Awaitable[None]] | None = None
    answered: dict[str, int] = field(default_factory=dict[str, int])
    prefix: str = "call"
    """Call ids start with it: agents sharing a thread need distinct ones, as providers mint."""

    def model(self) -> FunctionModel:
        return FunctionModel(self._respond, stream_function=self._stream, model_name="scripted")

    def _index(self, messages: list[ModelMessage]) -> int:
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        key = repr(
            [
                (p.part_kind, getattr(p, "tool_call_id", None), str(getattr(p, "content", "")))
                for p in last.parts
            ]
        )
        index = self.answered.setdefault(key, len(self.answered))
        assert index < len(self.replies), f"the script has no reply {index + 1}: {key}"
        return index

    async def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        index = self._index(messages)
        if self.gate is not None:
            await self.gate(index)
        reply = self.replies[index]
        if isinstance(reply, str):
            return ModelResponse(parts=[TextPart(reply)])
        return ModelResponse(
            parts=[
                ToolCallPart(name, json.dumps(args), tool_call_id=f"{self.prefix}_{index}_{n}")
                for n, (name, args) in enumerate(reply)
            ]
        )

    async def _stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        index = self._index(messages)
        if self.gate is not None:
            await self.gate(index)
        reply = self.replies[index]
        if isinstance(reply, str):
            words = reply.split(" ")
            for word in [f"{w} " for w in words[:-1]] + words[-1:]:
                yield word
            return
        for n, (name, args) in enumerate(reply):
            yield {n: DeltaToolCall(name=name, tool_call_id=f"{self.prefix}_{index}_{n}")}
            yield {n: DeltaToolCall(json_args=json.dumps(args))}


Build = Callable[[FunctionModel, Counter[str]], Agent[Any, Any]]


@dataclass(frozen=True)
class Row:
    """One feature: the agent that shows it, the model's replies, the user's prompts."""

    feature: str
    """What the row shows, as the docs table names it."""
    build: Build
    replies: list[Reply]
    prompts: tuple[str, ...] = ("Hello",)
    approvals: bool = False
    """Whether a turn pauses for approval (the test approves every pending call)."""
    note: str = ""
    deps: Callable[[], object] = lambda: None
    alone: Build | None = None
    """The agent pydantic-ai alone runs for the reference, when it cannot pause `build`'s as written:
    one with output validators pauses alone only with `DeferredToolRequests` in its own output type."""

    @property
    def steps(self) -> int:
        return len(self.replies)


# -- the rows' types and tools ---------------------------------------------------------------------


class City(BaseModel):
    name: str


class NoCity(BaseModel):
    reason: str


def make_city(name: str) -> City:
    """Make the city called `name`."""
    return City(name=name)


def shout(text: str) -> str:
    return text.upper()


def counted(ran: Counter[str]) -> Callable[..., Any]:
    """Tools that count their runs in `ran`."""

    def weather(city: str) -> str:
        """The weather in `city`."""
        ran["weather"] += 1
        return f"27 °C, overcast in {city}"

    return weather


def agent(model: FunctionModel, ran: Counter[str], **options: Any) -> Agent[Any, Any]:
    """An agent with the `weather` tool, and `options`."""
    tools = [*options.pop("tools", ()), counted(ran)]
    return Agent(model, name="conformance", instructions="Be brief.", tools=tools, **options)


def wire_tool(ran: Counter[str], **tool: Any) -> Tool[Any]:
    def wire(to: str, cents: int) -> str:
        """Wire `cents` to `to`."""
        ran["wire"] += 1
        return f"wired {cents} to {to}"

    return Tool(wire, **tool)


def _plain(replies: list[Reply]) -> list[Reply]:
    return [[("weather", {"city": "Paris"})], *replies]


WEATHER: list[Reply] = [[("weather", {"city": "Paris"})]]


def _validated(model: FunctionModel, ran: Counter[str], output_type: Any, **options: Any) -> Agent[Any, Any]:
    built = agent(model, ran, output_type=output_type, **options)

    @built.output_validator
    def no_atlantis(output: Any) -> Any:  # pyright: ignore[reportUnusedFunction]
        if isinstance(output, City) and output.name == "Atlantis":
            raise ModelRetry("Atlantis is not a city anyone can fly to")
        return output

    return built


def _dynamic(model: FunctionModel, ran: Counter[str]) -> Agent[Any, Any]:
    built = agent(model, ran, deps_type=str)

    @built.instructions
    def tenant(ctx: RunContext[str]) -> str:  # pyright: ignore[reportUnusedFunction]
        return f"You serve {ctx.deps}; {len(ctx.messages)} messages so far."

    return built


def _flaky(model: FunctionModel, ran: Counter[str]) -> Agent[Any, Any]:
    def forecast(days: int) -> str:
        """The forecast for the next `days` days (1 to 7)."""
        ran["forecast"] += 1
        if not 1 <= days <= 7:
            raise ModelRetry("days must be between 1 and 7")
        return f"sunny for {days} days"

    return agent(model, ran, tools=[forecast])


def _only_weather(ctx: RunContext[Any], defs: list[ToolDefinition]) -> list[ToolDefinition]:
    return [
        replace(d, description="Weather, today.") if d.name == "weather" else d
        for d in defs
        if d.name != "hidden"
    ]


def _prepared(model: FunctionModel, ran: Counter[str]) -> Agent[Any, Any]:
    def hidden() -> str:
        """Never offered."""
        return "hidden"

    return agent(model, ran, tools=[hidden], capabilities=[PrepareTools(_only_weather)])


class Audited(WrapperToolset[Any]):
    """A wrapper toolset of the user's own: it counts calls and marks results."""

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        return f"{await super().call_tool(name, tool_args, ctx, tool)} (audited)"


def _toolset(ran: Counter[str]) -> FunctionToolset[Any]:
    def crm_lookup(email: str) -> dict[str, str]:
        """Look a customer up by `email`."""
        ran["crm_lookup"] += 1
        return {"email": email, "plan": "premium"}

    def crm_delete(email: str) -> str:
        """Delete a customer."""
        ran["crm_delete"] += 1
        return "deleted"

    return FunctionToolset([crm_lookup, crm_delete])


def _with_toolset(wrap: Callable[[FunctionToolset[Any]], AbstractToolset[Any]]) -> Build:
    return lambda model, ran: agent(model, ran, toolsets=[wrap(_toolset(ran))])


def _mcp(model: FunctionModel, ran: Counter[str]) -> Agent[Any, Any]:
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai.mcp import MCPToolset

    server = MCPToolset(StdioTransport(command=sys.executable, args=[str(MCP_SERVER)]))
    return agent(model, ran, toolsets=[server])


def _keep_this_turn(messages: list[ModelMessage]) -> list[ModelMessage]:
    """Send the model this turn only: from the last request with a user prompt on."""
    starts = [
        i
        for i, message in enumerate(messages)
        if isinstance(message, ModelRequest) and any(isinstance(p, UserPromptPart) for p in message.parts)
    ]
    return messages[starts[-1] :] if starts else messages


def _hooked(model: FunctionModel, ran: Counter[str]) -> Agent[Any, Any]:
    async def stamp(
        ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: Any, result: Any
    ) -> Any:
        return f"{result} [checked]"

    return agent(model, ran, capabilities=[Hooks[Any](after_tool_execute=stamp)])


def _refund(ran: Counter[str]) -> Callable[..., str]:
    def refund(ctx: RunContext[Any], cents: int) -> str:
        """Refund `cents`; over 100 a person approves it."""
        if cents > 100 and not ctx.tool_call_approved:
            raise ApprovalRequired(metadata={"why": "over 100"})
        ran["refund"] += 1
        return f"refunded {cents}"

    return refund


def _asking(model: FunctionModel, ran: Counter[str]) -> Agent[Any, Any]:
    return agent(model, ran, tools=[_refund(ran)], output_type=[str, DeferredToolRequests])


ROWS: tuple[Row, ...] = (
    Row("`str` output", lambda m, r: agent(m, r), _plain(["It is 27 °C."])),
    Row(
        "a model output (`BaseModel`)",
        lambda m, r: agent(m, r, output_type=City),
        _plain([[("final_result", {"name": "Paris"})]]),
    ),
    Row(
        "a union output (`City` or `NoCity`)",
        lambda m, r: agent(m, r, output_type=City | NoCity),
        _plain([[("final_result_NoCity", {"reason": "no such place"})]]),
    ),
    Row(
        "`ToolOutput`",
        lambda m, r: agent(m, r, output_type=ToolOutput(City, name="give_city")),
        _plain([[("give_city", {"name": "Paris"})]]),
    ),
    Row(
        "`NativeOutput`",
        lambda m, r: agent(m, r, output_type=NativeOutput(City)),
        _plain(['{"name": "Paris"}']),
    ),
    Row(
        "`PromptedOutput`",
        lambda m, r: agent(m, r, output_type=PromptedOutput(City)),
        _plain(['{"name": "Paris"}']),
    ),
    Row("`TextOutput`", lambda m, r: agent(m, r, output_type=TextOutput(shout)), _plain(["it is warm"])),
    Row(
        "an output function",
        lambda m, r: agent(m, r, output_type=make_city),
        _plain([[("final_result", {"name": "Paris"})]]),
    ),
    Row(
        "an output validator (`@agent.output_validator`, `ModelRetry`)",
        lambda m, r: _validated(m, r, [City, NoCity]),
        _plain([[("final_result_City", {"name": "Atlantis"})], [("final_result_City", {"name": "Paris"})]]),
    ),
    Row(
        "an output validator with approvals, its union output type as written (`City` or `NoCity`)",
        lambda m, r: _validated(m, r, City | NoCity, tools=[wire_tool(r, requires_approval=True)]),
        [
            [("wire", {"to": "bob", "cents": 500})],
            [("final_result_City", {"name": "Atlantis"})],
            [("final_result_City", {"name": "Paris"})],
        ],
        approvals=True,
        alone=lambda m, r: _validated(
            m, r, City | NoCity | DeferredToolRequests, tools=[wire_tool(r, requires_approval=True)]
        ),
    ),
    Row(
        "an output validator with `ApprovalRequired` raised in a tool (`str` output)",
        lambda m, r: _validated(m, r, str, tools=[_refund(r)]),
        [[("refund", {"cents": 500})], "Refunded."],
        approvals=True,
        alone=lambda m, r: _validated(m, r, [str, DeferredToolRequests], tools=[_refund(r)]),
    ),
    Row(
        "an output validator with approvals (`DeferredToolRequests` in the output type)",
        lambda m, r: _validated(
            m, r, [City, NoCity, DeferredToolRequests], tools=[wire_tool(r, requires_approval=True)]
        ),
        [
            [("wire", {"to": "bob", "cents": 500})],
            [("final_result_City", {"name": "Atlantis"})],
            [("final_result_City", {"name": "Paris"})],
        ],
        approvals=True,
    ),
    Row(
        "`DeferredToolRequests` already in the output type",
        lambda m, r: agent(
            m, r, output_type=[str, DeferredToolRequests], tools=[wire_tool(r, requires_approval=True)]
        ),
        [[("wire", {"to": "bob", "cents": 500})], "Wired."],
        approvals=True,
    ),
    Row("dynamic instructions (`@agent.instructions`)", _dynamic, _plain(["Done."]), deps=lambda: "acme"),
    Row("`prepare_tools` (`PrepareTools`)", _prepared, _plain(["Done."])),
    Row(
        "a function toolset (`FunctionToolset`)",
        _with_toolset(lambda t: t),
        [[("crm_lookup", {"email": "a@b.c"})], "Premium."],
    ),
    Row(
        "a wrapped toolset (`WrapperToolset`)",
        _with_toolset(lambda t: Audited(t)),
        [[("crm_lookup", {"email": "a@b.c"})], "Premium."],
    ),
    Row(
        "a filtered toolset (`.filtered()`)",
        _with_toolset(lambda t: t.filtered(lambda ctx, d: d.name != "crm_delete")),
        [[("crm_lookup", {"email": "a@b.c"})], "Premium."],
    ),
    Row(
        "a prefixed toolset (`.prefixed()`)",
        _with_toolset(lambda t: t.prefixed("v2")),
        [[("v2_crm_lookup", {"email": "a@b.c"})], "Premium."],
    ),
    Row(
        "an MCP server over stdio (`MCPToolset`)",
        _mcp,
        [[("lookup_weather", {"city": "Oslo"})], "Cold."],
        note="its tools are listed per run; their approval needs `approval_required()` around the server",
    ),
    Row(
        "`ModelRetry` from a tool",
        _flaky,
        [[("forecast", {"days": 30})], [("forecast", {"days": 3})], "Sunny."],
    ),
    Row(
        "a history processor (`ProcessHistory`)",
        lambda m, r: agent(m, r, capabilities=[ProcessHistory(_keep_this_turn)]),
        [*WEATHER, "Warm.", *WEATHER, "Still warm."],
        prompts=("Weather?", "And now?"),
        note="it shapes what the model is sent; the stored conversation keeps every message a client saw",
    ),
    Row("a capability (`Hooks`)", _hooked, _plain(["Checked."])),
    Row(
        "parallel tool calls",
        lambda m, r: agent(m, r),
        [[("weather", {"city": "Paris"}), ("weather", {"city": "Rome"})], "Both warm."],
    ),
    Row(
        "approval: `requires_approval=True`",
        lambda m, r: agent(m, r, tools=[wire_tool(r, requires_approval=True)]),
        [[("wire", {"to": "bob", "cents": 500})], "Wired."],
        approvals=True,
    ),
    Row(
        "approval: `ApprovalRequired` raised in a tool",
        _asking,
        [[("refund", {"cents": 500})], "Refunded."],
        approvals=True,
    ),
    Row(
        "approval: a toolset wrapped with `approval_required()`",
        _with_toolset(lambda t: t.approval_required(lambda ctx, d, args: d.name == "crm_delete")),
        [[("crm_delete", {"email": "a@b.c"})], "Deleted."],
        approvals=True,
    ),
)


def feature_table(rows: Sequence[Row] = ROWS) -> str:
    """The docs' table of features, one line per row (every row passes every column, or the suite fails)."""
    lines = [
        "| pydantic-ai feature | a turn | a pause, approved | killed, then resumed | notes |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        pause = "✓" if row.approvals else "—"
        lines.append(f"| {row.feature} | ✓ | {pause} | ✓ | {row.note} |")
    return "\n".join(lines)
