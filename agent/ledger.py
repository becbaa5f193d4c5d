"""`ToolLedger`: exactly-once side effects for any tool, keyed by thread and `tool_call_id`.

A tool call can run more than once: a run that crashed after a tool acted, but before its
checkpoint stored the result, runs it again; so do duplicated decisions and racing resumes. The
ledger (`store.ledger`) makes the effect happen once:

- `once(ctx, effect)`: an effect in durable-chat's own database runs on the connection of a
  transaction that also records its result; a call that comes again gets the stored result.
- `external(ctx, call)`: an effect elsewhere (an HTTP API). `started` is committed before the
  call, which gets an idempotency key derived from the call; `succeeded` or `failed` after it. A
  call found `started` (its process died in between) is not run again on its own: the tool raises
  `ApprovalRequired`, the run pauses, and a human sees that its outcome is unknown and decides —
  approving runs it once more under the same idempotency key, rejecting tells the model so.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ApprovalRequired, ToolFailed
from pydantic_core import to_jsonable_python
from sqlalchemy.ext.asyncio import AsyncConnection

from store import Execution, Ledger, idempotency_key

from .records import call_id

__all__ = ("OUTCOME_UNKNOWN", "ToolLedger")

logger = logging.getLogger(__name__)

OUTCOME_UNKNOWN = "durable_chat_outcome"
"""The key of `ApprovalRequired.metadata` that marks a call held because its outcome is unknown."""


class ToolLedger:
    """The ledger as one run's tools see it (`RunScope.ledger`)."""

    def __init__(
        self,
        ledger: Ledger,
        thread_id: str,
        run_id: str,
        *,
        before: Callable[[], Awaitable[None]] | None = None,
        owner: str | None = None,
    ) -> None:
        self._ledger = ledger
        self._thread_id = thread_id
        self._run_id = run_id
        self._before = before
        """Awaited before a call touches the ledger: the step stores the response calling it first."""
        self._owner = owner
        """The worker driving the run: a call claims its row only while it holds the run (`store.ledger`)."""

    def idempotency_key(self, ctx: RunContext[Any]) -> str:
        """The key an external API deduplicates this call's retries by."""
        return idempotency_key(self._thread_id, call_id(ctx))

    async def once(self, ctx: RunContext[Any], effect: Callable[[AsyncConnection], Awaitable[Any]]) -> Any:
        """Run `effect` once per tool call, in one transaction with its ledger row.

        `effect` gets the transaction's connection: its writes commit with the ledger row or not at
        all. Its result must be JSON-like (dicts, lists, strings, numbers, pydantic models); it is
        stored as JSON, and a call that comes again gets it back decoded, without `effect` running.

        Raises:
            ToolFailed: The call was started as an external effect instead.
            store.LeaseLost: The run was taken over or cancelled: `effect` did not run, the step stops.
        """
        tool_call_id = call_id(ctx)
        if self._before is not None:
            await self._before()
        result, earlier = await self._ledger.once(
            self._thread_id,
            tool_call_id,
            run_id=self._run_id,
            tool_name=ctx.tool_name or "",
            effect=effect,
            encode=_json,
            owner=self._owner,
        )
        if earlier is None:
            return result
        logger.info("tool call %s of %s ran before; its stored result is used", tool_call_id, ctx.tool_name)
        return _recorded(earlier)

    async def external(self, ctx: RunContext[Any], call: Callable[[str], Awaitable[Any]]) -> Any:
        """Run `call(idempotency_key)` once per tool call, recording `started` before and the outcome after.

        The result is stored as JSON and answered again to a call that comes again; an exception
        from `call` is recorded as `failed` and raised. A call whose earlier attempt started and never
        finished raises `ApprovalRequired`: the run pauses for a human to decide (see the module).
        """
        tool_call_id = call_id(ctx)
        if self._before is not None:
            await self._before()
        go, execution = await self._ledger.start(
            self._thread_id,
            tool_call_id,
            run_id=self._run_id,
            tool_name=ctx.tool_name or "",
            owner=self._owner,
        )
        if not go:
            if execution.status == "started":
                logger.warning(
                    "tool call %s of %s started earlier and never finished; a human decides",
                    tool_call_id,
                    ctx.tool_name,
                )
                raise ApprovalRequired(
                    metadata={OUTCOME_UNKNOWN: "unknown", "started_at": execution.updated_at.isoformat()}
                )
            return _recorded(execution)
        key = idempotency_key(self._thread_id, tool_call_id)
        try:
            result = await call(key)
        except Exception as error:
            await self._ledger.finish(
                self._thread_id, tool_call_id, status="failed", error=f"{type(error).__name__}: {error}"
            )
            raise
        encoded = _json(result)
        await self._ledger.finish(self._thread_id, tool_call_id, status="succeeded", result=encoded)
        return result


def _json(value: Any) -> object:
    return to_jsonable_python(value)


def _recorded(execution: Execution) -> object:
    match execution.status:
        case "succeeded":
            return execution.result
        case "failed":
            raise ToolFailed(f"This call failed earlier and is not repeated: {execution.error}")
        case _:
            raise ToolFailed(
                f"This call was started as an external effect (status {execution.status!r}); "
                "it cannot also run as a database effect."
            )
