"""The runtime's hooks on every run, given to pydantic-ai as one capability.

A run needs six behaviours around the app's agent: blocked turns hidden from the model
(`HideBlockedTurns`), transient model errors retried (`ModelRetries`), tools that raise or hang
turned into failed results (`ToolFailures`), the argument schemas the model saw recorded
(`ToolSchemas`), the run paused at its deferred calls (`PauseAtDeferredCalls`), and the step told
when a request is about to go out (`sending`: the step stores a tool step's results then, as
pydantic-ai finished the request that carries them). The first five stay their own capabilities,
usable alone. pydantic-ai calls every hook of every capability of a run, each with its own copy of
the run context, whether the capability overrides the hook or not, and sorts a run's capabilities
again when one asks for a position: given separately, they cost nearly twice what they cost as one
(figures in `docs/benchmarks.md`). `RunHooks` overrides exactly the hooks the six need and hands
each call to the one that owns it. It is innermost, as the pause must be: a run's own capabilities
(an app's `HandleDeferredToolCalls`) see its deferred calls first, and pydantic-ai's
instrumentation, outermost, traces its tools' failures as failed results.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic_ai import DeferredToolRequests, DeferredToolResults, RunContext
from pydantic_ai.capabilities import AbstractCapability, CapabilityOrdering
from pydantic_ai.capabilities.abstract import ValidatedToolArgs, WrapToolExecuteHandler
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import ToolDefinition

from .arguments import ToolSchemas
from .files import FileResolver
from .guardrails import HideBlockedTurns
from .pauses import PAUSE_AT_DEFERRED_CALLS, PauseAtDeferredCalls
from .retries import ModelRetries
from .tool_failures import ToolFailures

__all__ = ("RunHooks",)


@dataclass
class RunHooks(AbstractCapability[Any]):
    """`HideBlockedTurns`, `ModelRetries`, `ToolFailures`, `ToolSchemas`, `PauseAtDeferredCalls`
    and `sending` as one capability."""

    retries: ModelRetries
    failures: ToolFailures
    schemas: ToolSchemas
    sending: Callable[[], Awaitable[None]] | None = None
    """Awaited before each attempt at a model request, once pydantic-ai has finished the request in
    the run's history (its time, run, instructions): `prepare_model_request`, the last hook before
    the model is called."""
    files: FileResolver | None = None
    """Resolves the thread's file references in each request (`agent.files`); the history keeps them."""
    tool_running: Callable[[], AbstractAsyncContextManager[None]] | None = None
    """Entered around each tool's execution (the step stores a slow tool's call while it runs)."""
    blocked: HideBlockedTurns = field(default_factory=HideBlockedTurns)
    """The run's own: it remembers the history its requests sent."""
    pause: ClassVar[PauseAtDeferredCalls] = PAUSE_AT_DEFERRED_CALLS

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # configured in code, not from an agent spec

    def get_ordering(self) -> CapabilityOrdering:
        return self.pause.get_ordering()

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[Any], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        return await self.pause.handle_deferred_tool_calls(ctx, requests=requests)

    async def on_run_error(self, ctx: RunContext[Any], *, error: BaseException) -> AgentRunResult[Any]:
        return await self.pause.on_run_error(ctx, error=error)

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        request_context = await self.blocked.before_model_request(ctx, request_context)
        if self.files is not None:
            request_context.messages = await self.files.resolve(request_context.messages)
        return request_context

    async def prepare_tools(
        self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        return await self.schemas.prepare_tools(ctx, tool_defs)

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        if self.sending is not None:
            await self.sending()
        return request_context

    async def on_model_request_error(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, error: Exception
    ) -> ModelResponse:
        return await self.retries.on_model_request_error(ctx, request_context=request_context, error=error)

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        if self.tool_running is None:
            return await self.failures.wrap_tool_execute(
                ctx, call=call, tool_def=tool_def, args=args, handler=handler
            )
        async with self.tool_running():
            return await self.failures.wrap_tool_execute(
                ctx, call=call, tool_def=tool_def, args=args, handler=handler
            )

    async def on_tool_execute_error(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        error: Exception,
    ) -> Any:
        return await self.failures.on_tool_execute_error(
            ctx, call=call, tool_def=tool_def, args=args, error=error
        )
