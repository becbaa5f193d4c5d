"""The demo shop through the step, as it is served (`shop_app()`): its model's rows reach its tools and
its data; refunds and cancellations change orders once. The core itself is tested on `core_app`."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa
from inline_snapshot import snapshot

from agent import decide, run_step
from agent.demo import BusinessData
from store import ApprovalPending, NewRun
from stream import CollectingSink, StreamEvent, ToolCall, transcript

from .step_app import App, AppFactory, shapes

pytestmark = pytest.mark.anyio


def business(app: App) -> BusinessData:
    return BusinessData(app.db.engine)


async def refunded_cents(app: App, order_id: str) -> int:
    order = await business(app).get_order(order_id)
    assert order is not None
    return order.refunded_cents


# -- the model's rows, through the shop's tools -----------------------------------------------------


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "Where is my order ORD-5678?",
            snapshot(
                [
                    "support: run_started message",
                    "support: user_message 'Where is my order ORD-5678?'",
                    "support: tool_call lookup_order {'order_id': 'ORD-5678'}",
                    "support: tool_result lookup_order success {'order_id': 'ORD-5678', 'item': 'Widget Pro', 'quantity': 2, 'total': 99.98, 'status': 'shipped', 'tracking': 'TRK-111', 'refunded': 0.0}",
                    "support: text IsStr(): 'Order ORD-5678: Widget Pro x2, $99.98, shipped (tracking TRK-111).'",
                    "support: text_done IsStr() 'Order ORD-5678: Widget Pro x2, $99.98, shipped (tracking TRK-111).'",
                    "support: run_finished completed output='Order ORD-5678: Widget Pro x2, $99.98, shipped (tracking TRK-111).'",
                ]
            ),
        ),
    ],
)
async def test_order_lookup_transcript(app: App, message: str, expected: list[str]) -> None:
    thread = await app.thread()
    sink = CollectingSink()
    await app.send(thread, message, sink=sink)
    assert _normalized(sink.events) == expected


@pytest.mark.parametrize(
    ("message", "tool", "needle"),
    [
        ("What plan is alice@example.com on?", "lookup_account", "Alice Johnson"),
        ("How long does shipping take?", "search_faq", "ship"),
        ("What is your warranty?", "search_faq", "warranty"),
        ("Can I make returns?", "search_faq", "30 days"),
    ],
)
async def test_lookups_answer_from_their_tool(app: App, message: str, tool: str, needle: str) -> None:
    thread = await app.thread()
    sink = CollectingSink()
    await app.send(thread, message, sink=sink)
    calls = [e for e in sink.events if isinstance(e, ToolCall)]
    assert [c.tool_name for c in calls] == [tool]
    finished = sink.events[-1]
    assert finished.type == "run_finished"
    assert finished.status == "completed"
    assert finished.output is not None
    assert needle.lower() in finished.output.lower()


async def test_a_leaky_reply_is_withdrawn_and_never_stored(app: App) -> None:
    # The demo's leaking reply streams up to where a leak pattern could start; the output
    # guardrail then withdraws it (see test_guardrails): the leak is never emitted.
    thread = await app.thread()
    sink = CollectingSink()
    await app.send(thread, "show me the stack trace", sink=sink)
    assert _normalized(sink.events) == snapshot(
        [
            "support: run_started message",
            "support: user_message 'show me the stack trace'",
            "support: text IsStr(): 'Oops, an '",
            "support: guardrail_tripped output internal_leak",
            'support: text_withdrawn IsStr() -> "I\'m sorry, something went wrong on our side while answering. Please try again, or ask me something else about your orders or account."',
            'support: run_finished completed output="I\'m sorry, something went wrong on our side while answering. Please try again, or ask me something else about your orders or account."',
        ]
    )
    for leaked in ("internal error occurred", "api_secret", "sk-live", "postgres://"):
        assert leaked not in str(sink.events)
        assert leaked not in str(await app.messages(thread))
        assert leaked not in str(await app.log(thread))


async def test_a_looping_turn_ends_politely_at_its_limit_and_the_thread_stays_usable(app: App) -> None:
    thread = await app.thread()
    sink = CollectingSink()
    await app.send(thread, "loop forever on ORD-9012", sink=sink)
    finished = sink.events[-1]
    assert finished.type == "run_finished"
    assert finished.status == "completed"
    assert finished.output is not None
    assert "more steps than I'm allowed" in finished.output
    assert sum(1 for e in sink.events if e.type == "tool_call") >= 5
    # The next message works: no dangling tool call blocks it.
    second = CollectingSink()
    await app.send(thread, "hello", sink=second)
    assert transcript(second.events)[-1].startswith("support: run_finished completed")


async def test_feedback_is_saved_once_as_a_record_of_the_thread(app: App) -> None:
    thread = await app.thread()
    sink = CollectingSink()
    await app.send(thread, "Some feedback: delivery was slow and support never answered", sink=sink)
    records = await app.db.records.list(thread.thread_id)
    assert len(records) == 1
    record = records[0]
    assert record.kind == "feedback"
    assert record.data["sentiment"] == "negative"
    assert record.tool_call_id == next(e.tool_call_id for e in sink.events if isinstance(e, ToolCall))
    assert transcript(sink.events)[-1].startswith("support: run_finished completed")


# -- refunds and cancellations, approved or not ---------------------------------------------------


async def test_refund_pauses_then_a_fresh_process_resumes_on_approval(app_factory: AppFactory) -> None:
    first = await app_factory()
    thread = await first.thread()
    sink = CollectingSink()
    await first.send(thread, "Please refund ORD-5678, it arrived broken", sink=sink)
    assert _normalized(sink.events) == snapshot(
        [
            "support: run_started message",
            "support: user_message 'Please refund ORD-5678, it arrived broken'",
            "support: tool_call lookup_order {'order_id': 'ORD-5678'}",
            "support: tool_result lookup_order success {'order_id': 'ORD-5678', 'item': 'Widget Pro', 'quantity': 2, 'total': 99.98, 'status': 'shipped', 'tracking': 'TRK-111', 'refunded': 0.0}",
            "support: tool_call issue_refund {'order_id': 'ORD-5678', 'amount': 99.98, 'reason': 'Please refund ORD-5678, it arrived broken'}",
            "support: approval_required [issue_refund {'order_id': 'ORD-5678', 'amount': 99.98, 'reason': 'Please refund ORD-5678, it arrived broken'}]",
            "support: run_finished awaiting_approval",
        ]
    )
    assert (await first.db.threads.get(thread.thread_id)).status == "awaiting_approval"
    [call_id] = await first.pending(thread)
    assert await refunded_cents(first, "ORD-5678") == 0
    with pytest.raises(ApprovalPending):
        await first.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="hello?"))

    # A new process: nothing of the paused run is in memory.
    second = await app_factory()
    decision = await decide(second.db, thread.thread_id, call_id, decision="approved", decided_by="bob")
    assert decision.resume_run_id is not None
    resumed = CollectingSink()
    assert await run_step(second.runtime, decision.resume_run_id, sink=resumed) == "completed"
    assert _normalized(resumed.events) == snapshot(
        [
            "support: run_started resume",
            "support: tool_result issue_refund success {'order_id': 'ORD-5678', 'refunded': 99.98, 'accepted': True, 'message': 'Refunded $99.98 for ORD-5678.'}",
            "support: text IsStr(): 'Refunded $99.98 for ORD-5678.'",
            "support: text_done IsStr() 'Refunded $99.98 for ORD-5678.'",
            "support: run_finished completed output='Refunded $99.98 for ORD-5678.'",
        ]
    )
    assert await refunded_cents(second, "ORD-5678") == 9998
    assert shapes(await second.messages(thread)) == snapshot(
        [
            "request: user-prompt",
            "response: tool-call(lookup_order)",
            "request: tool-return(lookup_order)",
            "response: tool-call(issue_refund)",
            "request: tool-return(issue_refund)",
            "response: text",
        ]
    )


async def test_an_edited_refund_refunds_the_edited_amount(app: App) -> None:
    thread = await app.thread()
    await app.send(thread, "refund ORD-5678 please")
    [call_id] = await app.pending(thread)
    edited = {"order_id": "ORD-5678", "amount": 50.0, "reason": "partial refund agreed on the phone"}
    decision = await decide(
        app.db, thread.thread_id, call_id, decision="approved", decided_by="bob", override_args=edited
    )
    assert decision.resume_run_id is not None
    sink = CollectingSink()
    await run_step(app.runtime, decision.resume_run_id, sink=sink)
    assert await refunded_cents(app, "ORD-5678") == 5000
    approval = await app.db.approvals.get(thread.thread_id, call_id)
    assert approval.override_args == edited
    assert approval.args["amount"] == 99.98
    result = next(e for e in sink.events if e.type == "tool_result")
    assert result.content == {
        "order_id": "ORD-5678",
        "refunded": 50.0,
        "accepted": True,
        "message": "Refunded $50.00 for ORD-5678.",
    }


async def test_a_rejected_refund_is_not_made_and_the_reply_quotes_the_reason(app: App) -> None:
    thread = await app.thread()
    await app.send(thread, "refund ORD-5678 please")
    [call_id] = await app.pending(thread)
    decision = await decide(
        app.db,
        thread.thread_id,
        call_id,
        decision="rejected",
        decided_by="bob",
        reason="outside the 30-day window",
    )
    assert decision.resume_run_id is not None
    sink = CollectingSink()
    await run_step(app.runtime, decision.resume_run_id, sink=sink)
    result = next(e for e in sink.events if e.type == "tool_result")
    assert result.outcome == "denied"
    finished = sink.events[-1]
    assert finished.type == "run_finished"
    assert finished.output is not None
    assert "outside the 30-day window" in finished.output
    assert await refunded_cents(app, "ORD-5678") == 0
    approval = await app.db.approvals.get(thread.thread_id, call_id)
    assert (approval.status, approval.reason) == ("rejected", "outside the 30-day window")


async def test_two_parallel_cancels_decided_differently(app_factory: AppFactory) -> None:
    first = await app_factory()
    thread = await first.thread()
    sink = CollectingSink()
    await first.send(thread, "Cancel ORD-9012 and ORD-3456 please", sink=sink)
    calls = [e for e in sink.events if isinstance(e, ToolCall)]
    assert [(c.tool_name, c.args["order_id"]) for c in calls] == [
        ("cancel_order", "ORD-9012"),
        ("cancel_order", "ORD-3456"),
    ]
    cancel_9012, cancel_3456 = (c.tool_call_id for c in calls)
    second = await app_factory()
    early = await decide(
        second.db,
        thread.thread_id,
        cancel_3456,
        decision="rejected",
        decided_by="bob",
        reason="customer changed their mind",
    )
    assert early.resume_run_id is None
    last = await decide(second.db, thread.thread_id, cancel_9012, decision="approved", decided_by="bob")
    assert last.resume_run_id is not None
    resumed = CollectingSink()
    await run_step(second.runtime, last.resume_run_id, sink=resumed)
    outcomes = {e.tool_call_id: e.outcome for e in resumed.events if e.type == "tool_result"}
    assert outcomes == {cancel_9012: "success", cancel_3456: "denied"}
    order = await business(second).get_order("ORD-9012")
    assert order is not None
    assert order.status == "cancelled"
    delivered = await business(second).get_order("ORD-3456")
    assert delivered is not None
    assert delivered.status == "delivered"


async def test_the_same_decision_at_once_from_four_processes_refunds_once(
    app_factory: AppFactory,
) -> None:
    apps = [await app_factory() for _ in range(4)]
    thread = await apps[0].thread()
    await apps[0].send(thread, "refund ORD-5678 please")
    [call_id] = await apps[0].pending(thread)
    decisions = await asyncio.gather(
        *(decide(a.db, thread.thread_id, call_id, decision="approved", decided_by="bob") for a in apps)
    )
    resume_ids = {d.resume_run_id for d in decisions}
    assert len(resume_ids) == 1
    [resume_id] = resume_ids
    assert resume_id is not None
    assert sum(not d.repeated for d in decisions) == 1
    # Every process tries to drive it: one does, the others find it taken.
    statuses = await asyncio.gather(*(run_step(a.runtime, resume_id) for a in apps))
    assert "completed" in statuses
    assert await refunded_cents(apps[0], "ORD-5678") == 9998
    async with apps[0].db.engine.connect() as connection:
        ledger = (await connection.execute(sa.text("SELECT count(*) FROM tool_executions"))).scalar_one()
    assert ledger == 1
    assert sum(e.type == "run_started" for e in await apps[0].log(thread)) == 2


async def test_regenerating_a_cancellation_that_paused_pauses_again_for_its_own_call(app: App) -> None:
    # The demo model's call ids carry a digest of the asking run: the regenerated turn's are its own.
    thread = await app.thread()
    await app.send(thread, "Please cancel ORD-9012")
    [first] = await app.pending(thread)
    decision = await decide(
        app.db, thread.thread_id, first, decision="rejected", decided_by="bob", reason="no"
    )
    assert decision.resume_run_id is not None
    assert await run_step(app.runtime, decision.resume_run_id) == "completed"

    run = (
        await app.db.runs.queue(
            NewRun(thread_id=thread.thread_id, kind="regenerate", content="Please cancel ORD-9012")
        )
    ).run

    assert await run_step(app.runtime, run.run_id) == "awaiting_approval"
    [again] = await app.pending(thread)
    assert again != first
    decision = await decide(app.db, thread.thread_id, again, decision="approved", decided_by="bob")
    assert decision.resume_run_id is not None
    assert await run_step(app.runtime, decision.resume_run_id) == "completed"
    order = await business(app).get_order("ORD-9012")
    assert order is not None
    assert order.status == "cancelled"


def _normalized(events: list[StreamEvent]) -> list[str]:
    """The transcript with part ids (which embed the run id) replaced, for stable snapshots."""
    lines = transcript(events)
    normalized: list[str] = []
    for said in lines:
        who, line = said.split(": ", 1) if said.startswith("support: ") else ("", said)
        if line.startswith("text_withdrawn "):
            line = "text_withdrawn IsStr() " + line.split(" ", 2)[2]
        if line.startswith(("text ", "text_done ")):
            head, rest = line.split(" ", 1)
            _, tail = rest.split(" ", 1) if head == "text_done" else rest.split(": ", 1)
            line = f"{head} IsStr() {tail}" if head == "text_done" else f"{head} IsStr(): {tail}"
        normalized.append(f"{who}: {line}" if who else line)
    return normalized
