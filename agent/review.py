"""Who decides a held call, by when, and what happens at its deadline: `ChatApp(review=policy)`.

The policy sees each call as it pauses (`ApprovalReview`, the same view `describe_approval` gets) and
answers a `Review`: the thread's user decides (the default), or a reviewer holding a role. The server
enforces the deadline (`worker.deadlines`). See `docs/review.md`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from store import Approval

__all__ = (
    "Escalate",
    "Review",
    "ReviewerRequired",
    "check_decider",
    "expiry_from_json",
    "expiry_json",
    "expiry_reason",
)

JsonObject = dict[str, object]

USER = "user"
"""`Review.by` for the thread's own user."""


@dataclass(frozen=True)
class Escalate:
    """At the deadline, hand the call to the role `to`, with a new deadline (`None`: none)."""

    to: str
    expires_after: timedelta | None = None
    on_expiry: Literal["reject"] | Escalate = "reject"
    """What happens at the new deadline."""

    def __post_init__(self) -> None:
        _check_role(self.to, "Escalate.to")
        _check_after(self.expires_after, "Escalate.expires_after")


@dataclass(frozen=True)
class Review:
    """Who decides a call: `by="user"` (the thread's user, the default) or a role a reviewer holds."""

    by: str = USER
    expires_after: timedelta | None = None
    """The deadline, from when the call pauses; `None`: it waits as long as it takes."""
    on_expiry: Literal["reject"] | Escalate = "reject"
    """At the deadline: reject the call (the model is told it expired), or escalate it."""

    def __post_init__(self) -> None:
        if not isinstance(self.by, str) or not self.by or len(self.by) > 255:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError(f"Review.by must be 'user' or a role name, not {self.by!r}")
        _check_after(self.expires_after, "Review.expires_after")


class ReviewerRequired(Exception):
    """The thread's user tried to decide a call that a reviewer with a role decides."""

    def __init__(self, approval: Approval) -> None:
        super().__init__(
            f"tool call {approval.tool_call_id!r} is decided by a reviewer with the role {approval.reviewers!r}"
        )
        self.approval = approval


def _check_role(role: str, what: str) -> None:
    if not isinstance(role, str) or not role or role == USER or len(role) > 255:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ValueError(f"{what} must be a role name (not 'user'), not {role!r}")


def _check_after(after: timedelta | None, what: str) -> None:
    if after is not None and after <= timedelta(0):
        raise ValueError(f"{what} must be a positive timedelta or None, not {after!r}")


def expiry_json(on_expiry: Literal["reject"] | Escalate) -> JsonObject:
    """What happens at a deadline, as the approvals table keeps it."""
    if isinstance(on_expiry, Escalate):
        return {
            "action": "escalate",
            "to": on_expiry.to,
            "expires_after": None
            if on_expiry.expires_after is None
            else on_expiry.expires_after.total_seconds(),
            "then": expiry_json(on_expiry.on_expiry),
        }
    return {"action": "reject"}


def expiry_from_json(stored: JsonObject | None) -> Literal["reject"] | Escalate:
    """The inverse of `expiry_json`; anything else is a rejection."""
    if stored is None or stored.get("action") != "escalate":
        return "reject"
    to, after, then = stored.get("to"), stored.get("expires_after"), stored.get("then")
    if not isinstance(to, str):
        return "reject"
    return Escalate(
        to=to,
        expires_after=timedelta(seconds=after) if isinstance(after, int | float) else None,
        on_expiry=expiry_from_json(then) if isinstance(then, dict) else "reject",  # pyright: ignore[reportUnknownArgumentType]
    )


def check_decider(
    roles: Collection[str] | None, not_found: Callable[[Approval], Exception]
) -> Callable[[Approval], None]:
    """The store's check of who decides: the thread's user (`roles` None) or a reviewer with `roles`.

    The user deciding a role's call is `ReviewerRequired`; a reviewer without the call's role gets
    `not_found(approval)`, as for a call that does not exist.
    """

    def check(approval: Approval) -> None:
        if roles is None:
            if approval.reviewers != USER:
                raise ReviewerRequired(approval)
        elif approval.reviewers == USER or approval.reviewers not in roles:
            raise not_found(approval)

    return check


def expiry_reason(approval: Approval, now: datetime) -> str:
    """What the model and the audit are told of a call rejected at its deadline."""
    waited = now - approval.created_at
    return f"no decision was made in time: the request expired after {_duration(waited)} without a decision"


def _duration(span: timedelta) -> str:
    seconds = max(int(span.total_seconds()), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [
        f"{hours} h" if hours else "",
        f"{minutes} min" if minutes else "",
        f"{seconds} s" if seconds and not hours else "",
    ]
    return " ".join(p for p in parts if p) or "0 s"
