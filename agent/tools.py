"""The customer-service tools, their dependencies, and validation of edited arguments.

`issue_refund` and `cancel_order` need a human's approval. Their side effects happen at most once
per `tool_call_id`: the business change and its ledger row commit in one transaction
(`store.business`), so a resume retried after a crash, a duplicated decision or two racing
resumes find the ledger row and return the recorded outcome instead of acting again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

import pydantic
from pydantic import Field
from pydantic_ai import RunContext, Tool
from pydantic_ai.models import Model

from store import NewRecord
from store.business import BusinessData

from .feedback import feedback_agent

__all__ = ("APPROVAL_TOOLS", "TOOLS", "Deps", "InvalidArguments", "RecordBuffer", "validate_args")

OrderId = Annotated[str, Field(description="The order id, like ORD-5678.", min_length=1, max_length=32)]


class RecordBuffer:
    """Records tools produce during a step, saved with the step's next checkpoint in one unit of work."""

    def __init__(self) -> None:
        self._pending: dict[str, NewRecord] = {}

    def add(self, record: NewRecord) -> None:
        # One record per tool call: a retried call replaces what it produced before it is saved.
        self._pending[record.tool_call_id] = record

    def drain(self) -> list[NewRecord]:
        records, self._pending = list(self._pending.values()), {}
        return records


@dataclass
class Deps:
    """What the tools may use: the business data, where they run, and a way to save records."""

    business: BusinessData
    thread_id: str
    run_id: str
    user_id: str
    feedback_model: Model | str
    records: RecordBuffer = field(default_factory=RecordBuffer)


async def lookup_order(ctx: RunContext[Deps], order_id: OrderId) -> dict[str, object]:
    """Look up an order: its item, quantity, total, status, tracking number and what was refunded."""
    order = await ctx.deps.business.get_order(order_id.strip().upper())
    if order is None:
        return {"error": f"No order {order_id!r} was found."}
    return order.as_content()


async def lookup_account(
    ctx: RunContext[Deps], email: Annotated[str, Field(description="The customer's e-mail address.")]
) -> dict[str, object]:
    """Look up a customer account by e-mail: name, plan and membership year."""
    account = await ctx.deps.business.get_account(email.strip())
    if account is None:
        return {"error": f"No account with the e-mail {email!r} was found."}
    return account.as_content()


async def search_faq(
    ctx: RunContext[Deps], query: Annotated[str, Field(description="What the customer asks about.")]
) -> dict[str, object]:
    """Search the help center's answers on shipping, returns and warranty."""
    answers = await ctx.deps.business.search_faq(query)
    if not answers:
        return {
            "answers": [],
            "note": "No help-center answer matches; offer to connect the customer with support.",
        }
    return {"answers": [answer.as_content() for answer in answers]}


async def issue_refund(
    ctx: RunContext[Deps],
    order_id: OrderId,
    amount: Annotated[float, Field(description="The amount to refund, in dollars.", gt=0, le=1_000_000)],
    reason: Annotated[str, Field(description="Why the customer is refunded.", max_length=2000)],
) -> dict[str, object]:
    """Refund an order, in full or in part. Needs a human's approval before it runs."""
    outcome = await ctx.deps.business.refund(
        thread_id=ctx.deps.thread_id,
        run_id=ctx.deps.run_id,
        tool_call_id=_call_id(ctx),
        order_id=order_id.strip().upper(),
        amount_cents=round(amount * 100),
        reason=reason,
    )
    return outcome.as_content()


async def cancel_order(
    ctx: RunContext[Deps],
    order_id: OrderId,
    reason: Annotated[str, Field(description="Why the customer cancels.", max_length=2000)],
) -> dict[str, object]:
    """Cancel an order that has not shipped yet. Needs a human's approval before it runs."""
    outcome = await ctx.deps.business.cancel(
        thread_id=ctx.deps.thread_id,
        run_id=ctx.deps.run_id,
        tool_call_id=_call_id(ctx),
        order_id=order_id.strip().upper(),
        reason=reason,
    )
    return outcome.as_content()


async def record_feedback(
    ctx: RunContext[Deps],
    conversation: Annotated[str, Field(description="What the customer said, verbatim.", max_length=20_000)],
) -> dict[str, object]:
    """Record the customer's feedback: a reviewer agent extracts sentiment, topics and follow-up needs."""
    result = await feedback_agent(ctx.deps.feedback_model).run(conversation, usage=ctx.usage)
    feedback = result.output
    ctx.deps.records.add(NewRecord(tool_call_id=_call_id(ctx), kind="feedback", data=feedback.model_dump()))
    return {"recorded": True, **feedback.model_dump()}


def _call_id(ctx: RunContext[Deps]) -> str:
    assert ctx.tool_call_id is not None, "pydantic-ai passes the call's id to every function tool"
    return ctx.tool_call_id


TOOLS: tuple[Tool[Deps], ...] = (
    Tool(lookup_order),
    Tool(lookup_account),
    Tool(search_faq),
    Tool(issue_refund, requires_approval=True),
    Tool(cancel_order, requires_approval=True),
    Tool(record_feedback),
)
APPROVAL_TOOLS = frozenset(tool.name for tool in TOOLS if tool.requires_approval)
_BY_NAME = {tool.name: tool for tool in TOOLS}


class InvalidArguments(ValueError):
    """Edited arguments do not fit the tool's schema."""

    def __init__(self, tool_name: str, errors: list[dict[str, object]]) -> None:
        self.tool_name = tool_name
        self.errors = errors
        details = "; ".join(f"{_location(error['loc'])}: {error['msg']}" for error in errors)
        super().__init__(f"the arguments do not fit {tool_name!r}: {details}")


def _location(loc: object) -> str:
    parts: list[object] = list(loc) if isinstance(loc, (list, tuple)) else [loc]  # pyright: ignore[reportUnknownArgumentType]
    return ".".join(str(part) for part in parts) or "(arguments)"


def validate_args(tool_name: str, args: object) -> dict[str, object]:
    """Check edited arguments against the schema the model sees for `tool_name`.

    Raises:
        InvalidArguments: They don't fit; the error lists each problem.
    """
    tool = _BY_NAME.get(tool_name)
    if tool is None:
        raise InvalidArguments(tool_name, [{"loc": (), "msg": "no such tool"}])
    if not isinstance(args, dict):
        raise InvalidArguments(tool_name, [{"loc": (), "msg": "arguments must be a JSON object"}])
    try:
        tool.function_schema.validator.validate_python(args)
    except pydantic.ValidationError as error:
        raise InvalidArguments(
            tool_name, [{"loc": list(item["loc"]), "msg": item["msg"]} for item in error.errors()]
        ) from error
    checked: dict[str, object] = {}
    for key, value in args.items():  # pyright: ignore[reportUnknownVariableType]  # a JSON object's keys
        checked[str(key)] = value  # pyright: ignore[reportUnknownArgumentType]
    return checked
