"""The demo shop's business data (orders, accounts, FAQ answers) and its side effects.

The shop's tables are its own (`shop_orders`, `shop_accounts`, `shop_faqs`), created by its own
migrations (`agent/demo/migrations`) when the shop starts, under its own version table: this is
how any app ships tables next to durable-chat's. `refund_in` and `cancel_in` change an order on a
connection the caller's transaction owns: the tools run them through `RunScope.ledger.once`, so
the change and its ledger row commit together, once per tool call. A refusal by the business
rules is an outcome too, stored like a success, so a retry gets the same answer even once the
order has changed.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from store import insert_new, reader, translate_errors

from .tables import accounts as _accounts
from .tables import faqs as _faqs
from .tables import orders as _orders

__all__ = (
    "Account",
    "BusinessData",
    "CancelOutcome",
    "FaqAnswer",
    "Order",
    "RefundOutcome",
    "cancel_in",
    "money",
    "refund_in",
)

logger = logging.getLogger(__name__)


def _dollars(cents: int) -> float:
    return round(cents / 100, 2)


def money(cents: int) -> str:
    """Cents as dollars for people, like $1,234.50."""
    sign = "-" if cents < 0 else ""
    return f"{sign}${abs(cents) // 100:,}.{abs(cents) % 100:02d}"


@dataclass(frozen=True)
class Order:
    """An order as a tool shows it. Money is integer cents here and dollars in `as_content`."""

    order_id: str
    item: str
    quantity: int
    total_cents: int
    status: str
    """`processing`, `shipped`, `delivered` or `cancelled`."""
    tracking: str | None
    refunded_cents: int

    @property
    def refundable_cents(self) -> int:
        """What a refund may still return: the total less what was refunded."""
        return self.total_cents - self.refunded_cents

    def as_content(self) -> dict[str, object]:
        return {
            "order_id": self.order_id,
            "item": self.item,
            "quantity": self.quantity,
            "total": _dollars(self.total_cents),
            "status": self.status,
            "tracking": self.tracking,
            "refunded": _dollars(self.refunded_cents),
        }


@dataclass(frozen=True)
class Account:
    email: str
    name: str
    plan: str
    member_since: int
    """The year the customer joined."""

    def as_content(self) -> dict[str, object]:
        return {"email": self.email, "name": self.name, "plan": self.plan, "member_since": self.member_since}


@dataclass(frozen=True)
class FaqAnswer:
    topic: str
    answer: str

    def as_content(self) -> dict[str, object]:
        return {"topic": self.topic, "answer": self.answer}


@dataclass(frozen=True)
class RefundOutcome:
    """What `issue_refund` did: the amount refunded, or why it refused (`accepted` false)."""

    order_id: str
    refunded_cents: int
    accepted: bool
    message: str

    def as_content(self) -> dict[str, object]:
        return {
            "order_id": self.order_id,
            "refunded": _dollars(self.refunded_cents),
            "accepted": self.accepted,
            "message": self.message,
        }


@dataclass(frozen=True)
class CancelOutcome:
    """What `cancel_order` did, or why it refused."""

    order_id: str
    cancelled: bool
    message: str

    def as_content(self) -> dict[str, object]:
        return {"order_id": self.order_id, "cancelled": self.cancelled, "message": self.message}


_SEED_ORDERS = (
    ("ORD-5678", "Widget Pro", 2, 9998, "shipped", "TRK-111"),
    ("ORD-9012", "Gadget Plus", 1, 14999, "processing", None),
    ("ORD-3456", "Cable Kit", 5, 2495, "delivered", None),
)
_SEED_ACCOUNTS = (
    ("alice@example.com", "Alice Johnson", "Premium", 2022),
    ("bob@example.com", "Bob Smith", "Free", 2024),
)
_SEED_FAQS = {
    "shipping": "Standard shipping takes 3-5 business days and is free on orders over $50. "
    "Express shipping arrives in 1-2 business days for $9.99, and every shipped order gets a "
    "tracking number by e-mail.",
    "returns": "You can return any item within 30 days of delivery for a full refund, as long as it "
    "is unused and in its original packaging. Start a return from your account page; the return "
    "label is free.",
    "warranty": "Every product carries a one-year warranty against manufacturing defects. Premium "
    "members get two years. To make a claim, contact support with your order id and a photo of "
    "the fault.",
}


class BusinessData:
    """The demo shop's orders, accounts and FAQ answers, in the shop's own tables of durable-chat's database."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._reader = reader(engine)

    async def seed(self) -> bool:
        """Insert the demo data into each of its tables that is empty; whether anything was inserted.

        Safe to run on every start and from several processes at once: duplicates are skipped.
        """
        now = datetime.now(UTC)
        rows: dict[sa.Table, list[dict[str, object]]] = {
            _orders: [
                {
                    "order_id": order_id,
                    "item": item,
                    "quantity": quantity,
                    "total_cents": total_cents,
                    "status": status,
                    "tracking": tracking,
                    "refunded_cents": 0,
                    "updated_at": now,
                }
                for order_id, item, quantity, total_cents, status, tracking in _SEED_ORDERS
            ],
            _accounts: [
                {"email": email, "name": name, "plan": plan, "member_since": since}
                for email, name, plan, since in _SEED_ACCOUNTS
            ],
            _faqs: [{"topic": topic, "answer": answer} for topic, answer in _SEED_FAQS.items()],
        }
        with translate_errors("seeding the demo business data"):
            async with self._reader.connect() as connection:
                filled = (
                    await connection.execute(sa.select(*(sa.exists().select_from(table) for table in rows)))
                ).one()
            empty = [table for table, has_rows in zip(rows, filled, strict=True) if not has_rows]
            if not empty:
                return False
            inserted = 0
            # Only writes in this transaction, so on SQLite the first statement takes the write lock.
            async with self.engine.begin() as connection:
                for table in empty:
                    key = table.primary_key.columns.values()[0]
                    statement = insert_new(self.engine.dialect.name, table).values(rows[table]).returning(key)
                    inserted += len((await connection.execute(statement)).all())
        if inserted:
            logger.info("seeded %d rows of demo business data", inserted)
        return inserted > 0

    async def get_order(self, order_id: str) -> Order | None:
        with translate_errors(f"reading order {order_id!r}"):
            async with self._reader.connect() as connection:
                return await _read_order(connection, _canonical_order_id(order_id))

    async def get_account(self, email: str) -> Account | None:
        """The account with this e-mail address, compared case-insensitively."""
        query = sa.select(_accounts).where(sa.func.lower(_accounts.c.email) == email.strip().lower())
        with translate_errors("reading an account"):
            async with self._reader.connect() as connection:
                row = (await connection.execute(query)).first()
        return None if row is None else Account(row.email, row.name, row.plan, row.member_since)

    async def search_faq(self, query: str) -> list[FaqAnswer]:
        """The answers whose topic a word of `query` names ("ship", "Returned", "warranties"), by topic.

        The FAQ is a handful of rows: they are matched here rather than with a text index.
        """
        words = {_singular(word) for word in re.findall(r"[a-z]+", query.lower())}
        with translate_errors("searching the FAQ"):
            async with self._reader.connect() as connection:
                rows = (await connection.execute(sa.select(_faqs).order_by(_faqs.c.topic))).all()
        return [FaqAnswer(row.topic, row.answer) for row in rows if _names_topic(words, row.topic)]


async def refund_in(
    connection: AsyncConnection, *, order_id: str, amount_cents: int, tool_call_id: str
) -> RefundOutcome:
    """Refund `amount_cents` of an order within the caller's transaction; a refused refund is an outcome too."""
    order_id = _canonical_order_id(order_id)
    order = await _read_order(connection, order_id, lock=True)
    if order is None:
        return RefundOutcome(order_id, 0, False, f"There is no order {order_id}; nothing was refunded.")
    if amount_cents <= 0:
        return RefundOutcome(
            order_id,
            0,
            False,
            f"A refund must be a positive amount; {money(amount_cents)} was asked for {order_id}.",
        )
    if order.refundable_cents <= 0:
        return RefundOutcome(order_id, 0, False, f"{order_id} was already refunded in full.")
    if amount_cents > order.refundable_cents:
        return RefundOutcome(
            order_id,
            0,
            False,
            f"{money(amount_cents)} is more than the {money(order.refundable_cents)} that remains "
            f"refundable on {order_id} (total {money(order.total_cents)}, "
            f"{money(order.refunded_cents)} already refunded).",
        )
    await connection.execute(
        _orders.update()
        .where(_orders.c.order_id == order_id)
        .values(refunded_cents=_orders.c.refunded_cents + amount_cents, updated_at=datetime.now(UTC))
    )
    logger.info("refunded %d cents of %s for tool call %s", amount_cents, order_id, tool_call_id)
    return RefundOutcome(order_id, amount_cents, True, f"Refunded {money(amount_cents)} for {order_id}.")


async def cancel_in(connection: AsyncConnection, *, order_id: str, tool_call_id: str) -> CancelOutcome:
    """Cancel an order that has not shipped, within the caller's transaction; a refusal is an outcome too."""
    order_id = _canonical_order_id(order_id)
    order = await _read_order(connection, order_id, lock=True)
    if order is None:
        return CancelOutcome(order_id, False, f"There is no order {order_id}; nothing was cancelled.")
    match order.status:
        case "delivered":
            refusal = f"{order_id} was delivered and can no longer be cancelled; a return is possible."
        case "shipped":
            refusal = f"{order_id} has shipped and can no longer be cancelled; a return is possible once it arrives."
        case "cancelled":
            refusal = f"{order_id} is already cancelled."
        case _:
            await connection.execute(
                _orders.update()
                .where(_orders.c.order_id == order_id)
                .values(status="cancelled", updated_at=datetime.now(UTC))
            )
            logger.info("cancelled %s for tool call %s", order_id, tool_call_id)
            return CancelOutcome(order_id, True, f"Cancelled {order_id}.")
    return CancelOutcome(order_id, False, refusal)


async def _read_order(connection: AsyncConnection, order_id: str, *, lock: bool = False) -> Order | None:
    query = sa.select(_orders).where(_orders.c.order_id == order_id)
    row = (await connection.execute(query.with_for_update() if lock else query)).first()
    if row is None:
        return None
    return Order(
        row.order_id, row.item, row.quantity, row.total_cents, row.status, row.tracking, row.refunded_cents
    )


def _canonical_order_id(order_id: str) -> str:
    return order_id.strip().upper()


def _singular(word: str) -> str:
    if word.endswith("ies"):
        return word[:-3] + "y"
    return word.removesuffix("s")


def _names_topic(words: set[str], topic: str) -> bool:
    stem = _singular(topic)
    # "ship" names "shipping", "returned" names "returns"; short words are too ambiguous to prefix.
    return any(
        word == stem or (len(word) >= 4 and (stem.startswith(word) or word.startswith(stem)))
        for word in words
    )
