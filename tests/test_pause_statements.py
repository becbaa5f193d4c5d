"""The statements and transactions a turn that pauses for a reviewer costs, pinned: adding one fails here.

A user's agent whose model asks for a tool that needs approval, its app sending the call to a
role with a deadline: the run queued and claimed in one transaction, and its pause (the response,
the run's end, its events, the pending approval and the review log's `approval_requested`, the
webhooks' outbox) in one more, on SQLite one function on the connection's thread, on PostgreSQL
one statement; no read. Counted as `test_turn_statements` counts a turn.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

import pytest
from inline_snapshot import snapshot
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from agent import ApprovalReview, ChatApp, Review, Runtime, RuntimeOptions, open_runtime, queue_run, run_step
from store import reader, review_data
from store.compiled import observing

from .test_turn_statements import Tally, _but_flushes, _watch

pytestmark = pytest.mark.anyio


def _refunding_agent() -> Agent[None, str]:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        yield "Let me refund that. "
        args = json.dumps({"order_id": "ORD-9012", "amount": 149.99})
        yield {0: DeltaToolCall(name="issue_refund", json_args=args, tool_call_id=f"refund-{len(messages)}")}

    agent = Agent(FunctionModel(stream_function=stream), name="shop")

    @agent.tool_plain(requires_approval=True)
    def issue_refund(order_id: str, amount: float) -> str:  # pyright: ignore[reportUnusedFunction]
        """Refund an order."""
        return f"Refunded {amount} on {order_id}"

    return agent


def _for_support(call: ApprovalReview) -> Review:
    return Review(by="support", expires_after=timedelta(hours=4))


Paused = Callable[[], Awaitable[tuple[Tally, str]]]


@pytest.fixture
async def paused_turn(database_url: str) -> AsyncIterator[tuple[Runtime, Paused]]:
    """A runtime of the refunding agent; `await play()` plays one turn to its pause: its tally and thread."""
    app = ChatApp(agent=_refunding_agent(), review=_for_support)
    async with open_runtime(app, database_url, options=RuntimeOptions(messages_per_minute=None)) as runtime:
        tally = Tally()
        _watch(runtime.db.engine, "write", tally)
        _watch(reader(runtime.db.engine), "read", tally)

        async def play() -> tuple[Tally, str]:
            thread = await runtime.db.threads.create(user_id="ada", title="t")
            tally.transactions.clear()
            tally.reads.clear()
            tally.rollbacks = 0
            tally.counting = True
            with observing(tally.ran_compiled, on_commit=tally.committed_compiled):
                opened = await queue_run(runtime, thread.thread_id, "message", content="Refund", claim=True)
                status = await run_step(runtime, opened.run.run_id, claimed=opened.claimed, span=opened.span)
            tally.counting = False
            assert status == "awaiting_approval"
            return tally, thread.thread_id

        yield runtime, play


async def test_a_paused_turn_is_two_transactions_and_no_read(
    paused_turn: tuple[Runtime, Paused], database_url: str
) -> None:
    _runtime, play = paused_turn
    await play()  # the instructions' first claim, and every first statement, before counting
    tally, _ = await play()
    counted = _but_flushes(tally, database_url)  # the event log's writer may store the text first: timing
    if database_url.startswith("sqlite"):
        assert counted == snapshot(
            {
                "statements (but events)": 8,
                "write transactions (but the writer's)": 2,
                "reads": [],
                "rollbacks outside a transaction": 0,
                "transactions": [
                    ["UPDATE threads", "INSERT runs"],
                    [
                        "INSERT conversation_entries",
                        "INSERT conversation_records",
                        "UPDATE runs",
                        "UPDATE threads",
                        "INSERT approvals",
                        "INSERT review_events",
                    ],
                ],
            }
        )
    else:
        assert counted == snapshot(
            {
                "statements (but events)": 2,
                "write transactions (but the writer's)": 2,
                "reads": [],
                "rollbacks outside a transaction": 0,
                "transactions": [
                    ["WITH: UPDATE threads, INSERT runs, INSERT events, SELECT pg_notify"],
                    [
                        "WITH: INSERT conversation_records, INSERT conversation_entries, INSERT approvals, SELECT, INSERT review_events, INSERT events, INSERT records, UPDATE runs, UPDATE threads, SELECT pg_notify"
                    ],
                ],
            }
        )


async def test_the_pause_stores_the_approval_and_its_review_event_as_held_one_by_one(
    paused_turn: tuple[Runtime, Paused],
) -> None:
    runtime, play = paused_turn
    before = await runtime.db.reviews.last_event_id()
    _, thread_id = await play()

    (approval,) = await runtime.db.approvals.list(thread_id=thread_id)
    assert (approval.status, approval.reviewers, approval.tool_name) == ("pending", "support", "issue_refund")
    assert approval.args == {"order_id": "ORD-9012", "amount": 149.99}
    assert approval.expires_at is not None
    assert approval.expires_at - approval.created_at > timedelta(hours=3, minutes=59)
    (requested,) = await runtime.db.reviews.events_after({"support"}, before)
    assert requested.type == "approval_requested"
    # The row a webhook carries is the approval as stored, as `append_review_event` writes it.
    assert requested.data == json.loads(json.dumps(review_data(approval, "ada")))
    thread = await runtime.db.threads.get(thread_id)
    assert thread.status == "awaiting_approval"
