"""How every run pauses at its deferred tool calls, whatever its agent's output type.

pydantic-ai ends a run with `DeferredToolRequests` only when that type is among the run's output
types, and refuses a run its own `output_type` when the agent has output validators. Its sanctioned
hooks do the rest: `handle_deferred_tool_calls` is called with the calls no other capability
resolved, and `on_run_error` may end a run with a result of its own. `PauseAtDeferredCalls` stops
the run there and ends it with those requests, so the agent keeps its output type as written. See
`docs/agent.md` ("How a run pauses").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai import DeferredToolRequests, DeferredToolResults, RunContext
from pydantic_ai.capabilities import AbstractCapability, CapabilityOrdering
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse
from pydantic_ai.run import AgentRunResult

__all__ = ("PAUSE_AT_DEFERRED_CALLS", "PauseAtDeferredCalls", "names_deferred_requests")


class _Paused(Exception):
    """Raised inside the tool step to end the run at its deferred calls; never leaves the run."""

    def __init__(self, requests: DeferredToolRequests, messages: list[ModelMessage]) -> None:
        super().__init__("the run paused at its deferred tool calls")
        self.requests = requests
        self.messages = messages
        """The run's history (the list itself): pydantic-ai appends the step's results to it as the
        exception leaves the step."""


@dataclass
class PauseAtDeferredCalls(AbstractCapability[Any]):
    """Ends a run with its `DeferredToolRequests` when tools need approval or run elsewhere.

    Innermost, so every other capability's `handle_deferred_tool_calls` (the user's
    `HandleDeferredToolCalls`) sees the calls first, and this one's `on_run_error` sees the pause first.
    An agent whose output type names `DeferredToolRequests` is left to pydantic-ai, which ends the
    run itself.
    """

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # configured in code, not from an agent spec

    def get_ordering(self) -> CapabilityOrdering:
        return CapabilityOrdering(position="innermost")

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[Any], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        if ctx.agent is not None and names_deferred_requests(ctx.agent.output_type):
            return None
        raise _Paused(requests, ctx.messages)

    async def on_run_error(self, ctx: RunContext[Any], *, error: BaseException) -> AgentRunResult[Any]:
        if not isinstance(error, _Paused):
            raise error
        _close_step(error.messages)
        if answered := _answered_inline(error.messages, error.requests):
            # Their answers went with the step: a resume would lack them, so the run fails instead.
            raise UserError(
                f"a HandleDeferredToolCalls capability answered only some of a step's deferred calls "
                f"({', '.join(answered)}): durable-chat pauses a step's calls all together, so it cannot "
                "keep those answers; answer all of a step's calls, or none"
            ) from error
        return AgentRunResult(error.requests)


PAUSE_AT_DEFERRED_CALLS = PauseAtDeferredCalls()
"""The one instance every run is given: it keeps no state."""


def _close_step(messages: list[ModelMessage]) -> None:
    """Leave the history as pydantic-ai leaves a run that ended with `DeferredToolRequests`.

    A step that raises ends with a request of the results it had (`state="interrupted"`, empty if
    none): a run ended at deferred calls has that request only when there are results, and complete.
    """
    last = messages[-1] if messages else None
    if not isinstance(last, ModelRequest) or last.state != "interrupted":
        return
    if last.parts:
        messages[-1] = replace(last, state="complete")
    else:
        messages.pop()


def _answered_inline(messages: Sequence[ModelMessage], requests: DeferredToolRequests) -> list[str]:
    """The calls of the step's response that have no result and are not pending: a handler answered them."""
    responses = [m for m in messages if isinstance(m, ModelResponse)]
    if not responses:
        return []
    last = messages[-1]
    results = {
        getattr(part, "tool_call_id", None) for part in (last.parts if isinstance(last, ModelRequest) else ())
    }
    pending = {call.tool_call_id for call in [*requests.calls, *requests.approvals]}
    return [
        call.tool_name
        for call in responses[-1].tool_calls
        if call.tool_call_id not in results and call.tool_call_id not in pending
    ]


def names_deferred_requests(spec: object) -> bool:
    """Whether an output spec names `DeferredToolRequests`: alone, in a list, or in a union."""
    if spec is DeferredToolRequests:
        return True
    items: Sequence[object] = ()
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        items = list(spec)  # pyright: ignore[reportUnknownArgumentType]
    elif isinstance(args := getattr(spec, "__args__", None), tuple):  # a union, `A | DeferredToolRequests`
        items = list(args)  # pyright: ignore[reportUnknownArgumentType]
    return any(names_deferred_requests(item) for item in items)
