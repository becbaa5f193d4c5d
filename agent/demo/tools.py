"""The shop's tools and their deps.

`issue_refund` and `cancel_order` need a human's approval (`requires_approval=True`). Their side
effects happen at most once per tool call: each runs through `RunScope.ledger.once`, so the order
changes in the same transaction as the call's ledger row, and a resume retried after a crash, a
duplicated decision or two racing resumes get the recorded outcome instead of acting again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import Field
from pydantic_ai import RunContext, Tool
from sqlalchemy.ext.asyncio import AsyncConnection

from agent import RunScope

from .business import BusinessData, cancel_in, refund_in
from .feedback import FEEDBACK_KIND, feedback_agent, feedback_model_for

__all__ = ("READ_ONLY_TOOLS", "TOOLS", "ShopDeps")

OrderId = Annotated[str, Field(description="The order id, like ORD-5678.", min_length=1, max_length=32)]


@dataclass(frozen=True)
class ShopDeps:
    """What the shop's tools use: its business data and the run's scope (records, ledger)."""

    business: BusinessData
    scope: RunScope


async def lookup_order(ctx: RunContext[ShopDeps], order_id: OrderId) -> dict[str, object]:
    """Look up an order: its item, quantity, total, status, tracking number and what was refunded."""
    order = await ctx.deps.business.get_order(order_id.strip().upper())
    if order is None:
        return {"error": f"No order {order_id!r} was found."}
    return order.as_content()


async def lookup_account(
    ctx: RunContext[ShopDeps], email: Annotated[str, Field(description="The customer's e-mail address.")]
) -> dict[str, object]:
    """Look up a customer account by e-mail: name, plan and membership year."""
    account = await ctx.deps.business.get_account(email.strip())
    if account is None:
        return {"error": f"No account with the e-mail {email!r} was found."}
    return account.as_content()


async def search_faq(
    ctx: RunContext[ShopDeps], query: Annotated[str, Field(description="What the customer asks about.")]
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
    ctx: RunContext[ShopDeps],
    order_id: OrderId,
    amount: Annotated[float, Field(description="The amount to refund, in dollars.", gt=0, le=1_000_000)],
    reason: Annotated[str, Field(description="Why the customer is refunded.", max_length=2000)],
) -> dict[str, object]:
    """Refund an order, in full or in part. Needs a human's approval before it runs."""

    async def refund(connection: AsyncConnection) -> dict[str, object]:
        outcome = await refund_in(
            connection,
            order_id=order_id,
            amount_cents=round(amount * 100),
            tool_call_id=ctx.tool_call_id or "",
        )
        return outcome.as_content()

    return await ctx.deps.scope.ledger.once(ctx, refund)


async def cancel_order(
    ctx: RunContext[ShopDeps],
    order_id: OrderId,
    reason: Annotated[str, Field(description="Why the customer cancels.", max_length=2000)],
) -> dict[str, object]:
    """Cancel an order that has not shipped yet. Needs a human's approval before it runs."""

    async def cancel(connection: AsyncConnection) -> dict[str, object]:
        outcome = await cancel_in(connection, order_id=order_id, tool_call_id=ctx.tool_call_id or "")
        return outcome.as_content()

    return await ctx.deps.scope.ledger.once(ctx, cancel)


async def record_feedback(
    ctx: RunContext[ShopDeps],
    conversation: Annotated[str, Field(description="What the customer said, verbatim.", max_length=20_000)],
) -> dict[str, object]:
    """Record the customer's feedback: a reviewer agent extracts sentiment, topics and follow-up needs."""
    result = await feedback_agent.run(conversation, model=feedback_model_for(ctx.model), usage=ctx.usage)
    feedback = result.output
    ctx.deps.scope.records.save(ctx, feedback, kind=FEEDBACK_KIND)
    return {"recorded": True, **feedback.model_dump()}


TOOLS: tuple[Tool[ShopDeps], ...] = (
    Tool(lookup_order),
    Tool(lookup_account),
    Tool(search_faq),
    Tool(issue_refund, requires_approval=True),
    Tool(cancel_order, requires_approval=True),
    Tool(record_feedback),
)
READ_ONLY_TOOLS = frozenset({"lookup_order", "lookup_account", "search_faq"})
"""The lookups: they change nothing, so a step calling only these needs no checkpoint before them."""
