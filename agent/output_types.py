"""What output type a run of a served agent asks pydantic-ai for, and the agents that cannot pause.

A run pauses by ending with `DeferredToolRequests`, so that type must be among the run's output
types. For most agents the step adds it per run (`agent.iter(output_type=[..., DeferredToolRequests])`).
pydantic-ai refuses a run's own `output_type` for an agent with output validators (they expect the
agent's own type): such an agent runs with its output type as written, and pauses only when the
user put `DeferredToolRequests` in it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pydantic_ai import DeferredToolRequests
from pydantic_ai.agent import AbstractAgent, WrapperAgent
from pydantic_ai.output import OutputSpec
from pydantic_ai.toolsets import (
    AbstractToolset,
    ApprovalRequiredToolset,
    CombinedToolset,
    FunctionToolset,
    WrapperToolset,
)

__all__ = ("UnservableAgent", "approval_tools", "check_servable", "has_output_validators", "run_output_type")


class UnservableAgent(ValueError):
    """An agent durable-chat cannot serve as written: the message says why and what to change."""


def run_output_type(agent: AbstractAgent[Any, Any]) -> OutputSpec[Any] | None:
    """The `output_type` a run passes: the agent's with `DeferredToolRequests`, or `None` (the agent's
    own) when the agent has output validators or already names `DeferredToolRequests`."""
    spec: Any = agent.output_type
    if has_output_validators(agent) or _names_deferred(spec):
        return None
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        return [*spec, DeferredToolRequests]  # pyright: ignore[reportUnknownVariableType]
    return [spec, DeferredToolRequests]


def can_pause(agent: AbstractAgent[Any, Any]) -> bool:
    """Whether a run of `agent` may end with `DeferredToolRequests`."""
    return run_output_type(agent) is not None or _names_deferred(agent.output_type)


def check_servable(agent: AbstractAgent[Any, Any]) -> None:
    """Refuse, with what to change, an agent whose approval tools could never pause a run.

    Raises:
        UnservableAgent: The agent has output validators, its output type lacks
            `DeferredToolRequests`, and some of its tools need approval.
    """
    if can_pause(agent):
        return
    needing = approval_tools(agent)
    if not needing:
        return
    name = agent.name or "the agent"
    raise UnservableAgent(
        f"{name!r} has output validators, so pydantic-ai runs it only with its own output type, "
        f"{_named(agent.output_type)}, which lacks DeferredToolRequests: its tools that need "
        f"approval ({', '.join(needing)}) could never pause a run. Add DeferredToolRequests to its "
        f"output types: Agent(..., output_type=[{_members(agent.output_type)}, DeferredToolRequests])"
    )


def has_output_validators(agent: AbstractAgent[Any, Any]) -> bool:
    """Whether `agent` (or the agent a wrapper wraps) has `@agent.output_validator`s.

    pydantic-ai keeps them private (`Agent._output_validators`) and exposes no accessor; reading it is
    the only way to know before a run fails with `UserError`.
    """
    while isinstance(agent, WrapperAgent):
        agent = agent.wrapped  # pyright: ignore[reportUnknownMemberType]
    validators: object = getattr(agent, "_output_validators", ())
    return bool(validators)


def approval_tools(agent: AbstractAgent[Any, Any]) -> list[str]:
    """The tools of `agent` that visibly need approval: `requires_approval=True`, or in a toolset
    wrapped with `approval_required()`. A tool raising `ApprovalRequired` itself, or one of a
    toolset known only at run time (an MCP server's), cannot be seen before it runs."""
    return sorted({name for toolset in agent.toolsets for name in _needing(toolset, wrapped=False)})


def _needing(toolset: AbstractToolset[Any], *, wrapped: bool) -> Iterator[str]:
    match toolset:
        case ApprovalRequiredToolset():
            yield from _needing(toolset.wrapped, wrapped=True)
        case WrapperToolset():
            yield from _needing(toolset.wrapped, wrapped=wrapped)
        case CombinedToolset():
            for inner in toolset.toolsets:
                yield from _needing(inner, wrapped=wrapped)
        case FunctionToolset():
            for name, tool in toolset.tools.items():
                if wrapped or tool.requires_approval:
                    yield name
        case _:
            pass


def _names_deferred(spec: object) -> bool:
    if spec is DeferredToolRequests:
        return True
    items: Sequence[object] = ()
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        items = list(spec)  # pyright: ignore[reportUnknownArgumentType]
    elif isinstance(args := getattr(spec, "__args__", None), tuple):  # a union, `A | DeferredToolRequests`
        items = list(args)  # pyright: ignore[reportUnknownArgumentType]
    return any(_names_deferred(item) for item in items)


def _named(spec: object) -> str:
    """`spec` as a user wrote it: `Flight`, `Flight | NoFlight`, `[Flight, NoFlight]`."""
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        return f"[{_members(spec)}]"  # pyright: ignore[reportUnknownArgumentType]
    args: object = getattr(spec, "__args__", None)
    if isinstance(args, tuple):
        return " | ".join(_named(item) for item in args)  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    name: object = getattr(spec, "__name__", None)
    return name if isinstance(name, str) else repr(spec)


def _members(spec: object) -> str:
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        return ", ".join(_named(item) for item in spec)  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    return _named(spec)
