"""Why a unit of work on the compiled path stored nothing, and how a PostgreSQL statement says so.

A statement with guards only its own writes can check refuses itself when one fails: its result
casts the reason to an integer, which fails and rolls it back (see "A checkpoint's trip" in
`docs/store.md`). On SQLite the unit of work is a function that returns the reason instead.
"""

from __future__ import annotations

from typing import Literal, get_args

import sqlalchemy as sa

__all__ = ("Refusal", "refuse_unless", "refused")

Refusal = Literal[
    "conflict", "carried conflict", "no run", "lease lost", "no thread", "held", "keyed", "active", "pending"
]
"""A conversation's revision changed (or its record exists; `carried conflict`: the carried one's of
a statement saving two), a run or thread is gone, a lease is lost, a pause's call is held already; a
run is not queued: its idempotency key names one already, another is active, approvals wait."""

_REASONS: tuple[Refusal, ...] = get_args(Refusal)
_REFUSED = "durable-chat refused: "


def refuse_unless(*reasons: tuple[sa.ColumnElement[bool], Refusal]) -> sa.ColumnElement[int]:
    """PostgreSQL: 0 when no condition holds; else the statement fails, naming the first that does.

    The cast applies to the whole `CASE`: a cast of a constant would be evaluated as the statement
    is planned, and fail every time.
    """
    return sa.cast(
        sa.case(*((condition, _REFUSED + reason) for condition, reason in reasons), else_="0"), sa.Integer
    )


def refused(error: BaseException) -> Refusal | None:
    """The refusal a statement of `refuse_unless` raised as `error` (asyncpg's), or `None` for another error."""
    if getattr(error, "sqlstate", None) != "22P02":
        return None
    text = str(error)
    start = text.find(_REFUSED)
    if start < 0:
        return None
    # The server's message quotes the value as its language does (`"…"`, `«…»`, `„…“`): the reason
    # is read up to whatever follows it, not up to an ASCII quote.
    rest = text[start + len(_REFUSED) :]
    for known in _REASONS:
        if rest.startswith(known) and not rest[len(known) : len(known) + 1].isalnum():
            return known
    return None
