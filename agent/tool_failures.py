"""Tools that raise or hang: a `failed` tool result for the model, never a crashed run.

pydantic-ai 2.68 lets a tool raise `ModelRetry` (the model is asked to try again, within the
tool's retry budget; beyond it the run raises) or `ToolFailed` (a `failed` tool result the model
sees and adapts to, with no budget). Any other exception ends the run, and its own tool `timeout`
turns into a `ModelRetry` that a model calling the same hanging tool twice exhausts. `ToolFailures`
is a capability that turns both into `ToolFailed`:

- an exception a tool raises becomes a `failed` result saying the tool is unavailable; its type
  is logged, never its message (it may quote the conversation) and never shown to the model;
- a tool still running after its timeout is cancelled the same way. A call a human approved has
  none by default (`ChatApp.approved_tool_timeout`): it is a sanctioned side effect, made
  exactly-once by the ledger, and cutting it off after it acted would tell the model that it
  failed. The time a tool spends in a delegated agent's run (`RunScope.delegate`, `paused`) does
  not count: that agent's model calls and tools have their own limits, and its pause for a human
  ends the run rather than waiting.

`ModelRetry` and `ToolFailed` raised on purpose keep their meaning, and so does `UsageLimitExceeded`
from a sub-agent (`record_feedback`): the turn's budget is spent and the run ends politely. So does
`store.LeaseLost` from a write a tool caused (the ledger's claim, a delegated run's checkpoint): the
run was taken over or cancelled, and the step stops there, as on any other write it loses; and
`store.DatabaseUnavailable` (the ledger, records, files or a delegated run found the database down):
the run is left to continue from its last checkpoint, as anywhere else in the step (`agent.step`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities.abstract import ValidatedToolArgs, WrapToolExecuteHandler
from pydantic_ai.exceptions import ToolFailed, UsageLimitExceeded, UserError
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import ToolDefinition

from store import DatabaseUnavailable, LeaseLost

__all__ = ("ToolFailures",)

logger = logging.getLogger(__name__)


@dataclass
class ToolFailures(AbstractCapability[Any]):
    """Failed tool results for tools that raise, or run longer than their timeout."""

    timeout: float | None = 30.0
    """Seconds a tool may run; `None`: no limit."""
    approved_timeout: float | None = None
    """Seconds a call a human approved may run; `None`: no limit."""
    timeouts: Mapping[str, float | None] = field(default_factory=dict[str, "float | None"])
    """Per-tool overrides of both (`None`: no limit for that tool)."""
    _deadlines: dict[tuple[str | None, str | None], asyncio.Timeout] = field(
        default_factory=dict[tuple["str | None", "str | None"], asyncio.Timeout], repr=False
    )
    """The deadline of each call running now, by its run and call id."""

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # configured in code, not from an agent spec

    def timeout_of(self, tool_name: str, *, approved: bool = False) -> float | None:
        if tool_name in self.timeouts:
            return self.timeouts[tool_name]
        return self.approved_timeout if approved else self.timeout

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        limit = self.timeout_of(call.tool_name, approved=ctx.tool_call_approved)
        if limit is None:
            return await handler(args)
        key = (ctx.run_id, call.tool_call_id)
        try:
            async with asyncio.timeout(limit) as deadline:
                self._deadlines[key] = deadline
                try:
                    return await handler(args)
                finally:
                    del self._deadlines[key]
        except TimeoutError:
            # Only our deadline gets here: a tool's own TimeoutError went through `on_tool_execute_error`.
            logger.warning("tool %s of run %s timed out after %ss", call.tool_name, ctx.run_id, limit)
            raise ToolFailed(
                f"The tool {call.tool_name} did not answer within {limit:g} seconds and was stopped. "
                "Tell the user it is unavailable right now and offer to try again later."
            ) from None

    @asynccontextmanager
    async def paused(self, ctx: RunContext[Any]) -> AsyncGenerator[None]:
        """Stop the clock of the call `ctx` runs while the block runs (a delegated agent's sub-run)."""
        deadline = self._deadlines.get((ctx.run_id, ctx.tool_call_id))
        when = None if deadline is None else deadline.when()
        if deadline is None or when is None:
            yield
            return
        loop = asyncio.get_running_loop()
        left = when - loop.time()
        deadline.reschedule(None)
        try:
            yield
        finally:
            deadline.reschedule(loop.time() + left)

    async def on_tool_execute_error(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        error: Exception,
    ) -> Any:
        if isinstance(error, UsageLimitExceeded | LeaseLost | DatabaseUnavailable):
            # A sub-agent spent the turn's budget: the run ends politely; another worker (or a
            # cancel) took the run: this attempt stops, storing nothing more; or the database is
            # away: the run continues from its last checkpoint once it answers (see agent.step).
            raise error
        if isinstance(error, UserError) and "DeferredToolRequests" in str(error):
            # An agent run inside the tool with a plain `agent.run` met a call needing approval.
            logger.error(
                "tool %s of run %s ran an agent whose tool call needs approval; run that agent with "
                "`scope.delegate(ctx, agent, prompt)` so that its approvals pause the run",
                call.tool_name,
                ctx.run_id,
            )
            raise ToolFailed(
                f"The tool {call.tool_name} ran an agent whose tool call needs approval, which it cannot "
                "wait for there: the app must run that agent with `scope.delegate(ctx, agent, prompt)`. "
                "Tell the user it is unavailable right now."
            ) from error
        logger.warning("tool %s of run %s raised %s", call.tool_name, ctx.run_id, type(error).__name__)
        logger.debug("tool %s raised", call.tool_name, exc_info=error)
        raise ToolFailed(
            f"The tool {call.tool_name} failed unexpectedly. "
            "Tell the user it is unavailable right now and offer to try again later."
        ) from error
