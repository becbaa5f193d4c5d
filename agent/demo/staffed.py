"""The demo shop with staff review: `agent.demo:staffed_shop_app`.

Refunds over $50 and every cancellation go to `support`, with a 4 h deadline that escalates to
`managers` (who get 4 h more, then the call is rejected); smaller refunds the customer confirms.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from agent import ApprovalReview, ChatApp, Escalate, Review

from .app import shop_app
from .tools import ShopDeps

__all__ = ("STAFF_LIMIT", "staffed_review", "staffed_shop_app")

STAFF_LIMIT = 50.0
"""Refunds above this many dollars go to support."""

_DEADLINE = timedelta(hours=4)


def staffed_review(call: ApprovalReview) -> Review:
    """Who decides a shop call: support (then managers) for cancellations and large refunds."""
    amount = call.args.get("amount")
    small_refund = (
        call.tool_name == "issue_refund" and isinstance(amount, int | float) and amount <= STAFF_LIMIT
    )
    if small_refund:
        return Review(by="user")
    return Review(
        by="support", expires_after=_DEADLINE, on_expiry=Escalate(to="managers", expires_after=_DEADLINE)
    )


def staffed_shop_app(*, delay: float | None = None) -> ChatApp[ShopDeps]:
    """The demo shop, its refunds over $50 and its cancellations decided by staff."""
    return dataclasses.replace(
        shop_app(delay=delay), review=staffed_review, reviewer_roles=("support", "managers")
    )
