"""Approvals through the step, on the core tests' own app: a run pauses, a decision (possibly with
edited arguments, or a rejection with a reason) resumes it in a fresh process; repeated and racing
decisions resume once and move money once. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa
from inline_snapshot import snapshot

from agent import InvalidArguments, decide, run_step
from store import AlreadyDecided, ApprovalPending, NewRun, NotFound, Thread
from stream import CollectingSink, ToolCall

from .core_app import CoreFactory, moved
from .scripted import Calls, Script, lines
from .step_app import App, shapes

pytestmark = pytest.mark.anyio


def paying(reply: str = "Sent.") -> Script:
    """A turn that looks the balance up, then asks to send bob 25.50; `reply` after the transfer."""
    return Script(
        [
            Calls([("lookup", {"key": "balance"})]),
            Calls([("transfer", {"to": "bob", "amount": 25.5})]),
            reply,
        ]
    )


async def paused(app: App) -> tuple[Thread, str]:
    """A thread paused on the transfer `paying` asks for, and the call's id."""
    thread = await app.thread()
    await app.send(thread, "Send bob 25.50")
    [call_id] = await app.pending(thread)
    return thread, call_id


async def test_a_call_needing_approval_pauses_then_a_fresh_process_resumes_on_approval(
    core_factory: CoreFactory,
) -> None:
    script = paying("Sent 25.50 to bob.")
    first = await core_factory(script)
    thread = await first.thread()
    sink = CollectingSink()
    await first.send(thread, "Please send bob 25.50", sink=sink)
    assert lines(sink.events) == snapshot(
        [
            "core: run_started message",
            "core: user_message 'Please send bob 25.50'",
            "core: tool_call lookup {'key': 'balance'}",
            "core: tool_result lookup success 'balance for acme (user alice)'",
            "core: tool_call transfer {'to': 'bob', 'amount': 25.5}",
            "core: approval_required [transfer {'to': 'bob', 'amount': 25.5}]",
            "core: run_finished awaiting_approval",
        ]
    )
    assert (await first.db.threads.get(thread.thread_id)).status == "awaiting_approval"
    [call_id] = await first.pending(thread)
    assert await moved(first) == []
    with pytest.raises(ApprovalPending):
        await first.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="hello?"))

    # A new process: nothing of the paused run is in memory.
    second = await core_factory(script)
    decision = await decide(second.db, thread.thread_id, call_id, decision="approved", decided_by="bob")
    assert decision.resume_run_id is not None
    resumed = CollectingSink()
    assert await run_step(second.runtime, decision.resume_run_id, sink=resumed) == "completed"
    assert lines(resumed.events) == snapshot(
        [
            "core: run_started resume",
            "core: tool_result transfer success {'sent': 25.5, 'to': 'bob'}",
            "core: text part: 'Sent 25.50 to bob.'",
            "core: text_done part 'Sent 25.50 to bob.'",
            "core: run_finished completed output='Sent 25.50 to bob.'",
        ]
    )
    assert await moved(second) == [("bob", 2550)]
    assert shapes(await second.messages(thread)) == snapshot(
        [
            "request: user-prompt",
            "response: tool-call(lookup)",
            "request: tool-return(lookup)",
            "response: tool-call(transfer)",
            "request: tool-return(transfer)",
            "response: text",
        ]
    )
    # The decision is on record with who made it; the log holds every event once, in order.
    approval = await second.db.approvals.get(thread.thread_id, call_id)
    assert (approval.status, approval.decided_by, approval.resume_run_id) == (
        "approved",
        "bob",
        decision.resume_run_id,
    )
    log = await second.log(thread)
    assert [e.type for e in log].count("approval_decided") == 1
    # Every event type the core produces on a paused and resumed run appears in this one flow.
    assert {e.type for e in log} == {
        "run_started",
        "user_message",
        "text_delta",
        "text_done",
        "tool_call",
        "tool_result",
        "approval_required",
        "approval_decided",
        "run_finished",
    }
    # Ids increase and are unique; a run's unused reserved ids leave gaps, never reuse.
    event_ids = [e.event_id for e in await second.db.events.read(thread.thread_id)]
    assert event_ids == sorted(set(event_ids))
    assert len(event_ids) == len(log)


async def test_edited_arguments_are_what_runs_and_both_are_kept(core_factory: CoreFactory) -> None:
    app = await core_factory(paying())
    thread, call_id = await paused(app)
    edited = {"to": "bob", "amount": 10.0}
    decision = await decide(
        app.db, thread.thread_id, call_id, decision="approved", decided_by="ada", override_args=edited
    )
    assert decision.resume_run_id is not None
    sink = CollectingSink()
    await run_step(app.runtime, decision.resume_run_id, sink=sink)
    assert await moved(app) == [("bob", 1000)]
    approval = await app.db.approvals.get(thread.thread_id, call_id)
    assert approval.override_args == edited
    assert approval.args == {"to": "bob", "amount": 25.5}
    result = next(e for e in sink.events if e.type == "tool_result")
    assert result.content == {"sent": 10.0, "to": "bob"}


async def test_edited_arguments_that_do_not_fit_the_schema_are_refused(core_factory: CoreFactory) -> None:
    app = await core_factory(paying())
    thread, call_id = await paused(app)
    with pytest.raises(InvalidArguments) as raised:
        await decide(
            app.db,
            thread.thread_id,
            call_id,
            decision="approved",
            decided_by="ada",
            override_args={"to": "bob", "amount": "lots"},
        )
    assert "amount" in str(raised.value)
    assert await app.pending(thread) == [call_id]


async def test_a_rejected_call_is_not_made_and_the_model_reads_the_reason(core_factory: CoreFactory) -> None:
    script = paying("I did not send it: the reviewer said no.")
    app = await core_factory(script)
    thread, call_id = await paused(app)
    decision = await decide(
        app.db,
        thread.thread_id,
        call_id,
        decision="rejected",
        decided_by="ada",
        reason="bob's account is closed",
    )
    assert decision.resume_run_id is not None
    sink = CollectingSink()
    await run_step(app.runtime, decision.resume_run_id, sink=sink)
    assert lines(sink.events)[1:2] == snapshot(
        ['core: tool_result transfer denied "The reviewer rejected this call: bob\'s account is closed"']
    )
    assert "The reviewer rejected this call: bob's account is closed" in str(script.requests[-1])
    assert await moved(app) == []
    approval = await app.db.approvals.get(thread.thread_id, call_id)
    assert (approval.status, approval.reason) == ("rejected", "bob's account is closed")


async def test_two_parallel_calls_decided_differently(core_factory: CoreFactory) -> None:
    both = Calls([("transfer", {"to": "bob", "amount": 10}), ("transfer", {"to": "carol", "amount": 20})])
    script = Script([both, "Sent to bob only."])
    first = await core_factory(script)
    thread = await first.thread()
    sink = CollectingSink()
    await first.send(thread, "Send bob 10 and carol 20", sink=sink)
    calls = [e for e in sink.events if isinstance(e, ToolCall)]
    assert [(c.tool_name, c.args["to"]) for c in calls] == [("transfer", "bob"), ("transfer", "carol")]
    to_bob, to_carol = (c.tool_call_id for c in calls)
    second = await core_factory(script)
    early = await decide(
        second.db, thread.thread_id, to_carol, decision="rejected", decided_by="ada", reason="not carol"
    )
    assert early.resume_run_id is None
    last = await decide(second.db, thread.thread_id, to_bob, decision="approved", decided_by="ada")
    assert last.resume_run_id is not None
    resumed = CollectingSink()
    await run_step(second.runtime, last.resume_run_id, sink=resumed)
    outcomes = {e.tool_call_id: e.outcome for e in resumed.events if e.type == "tool_result"}
    assert outcomes == {to_bob: "success", to_carol: "denied"}
    assert await moved(second) == [("bob", 1000)]


async def test_deciding_twice_is_harmless_and_the_opposite_is_refused(core_factory: CoreFactory) -> None:
    app = await core_factory(paying())
    thread, call_id = await paused(app)
    first = await decide(app.db, thread.thread_id, call_id, decision="approved", decided_by="ada")
    again = await decide(app.db, thread.thread_id, call_id, decision="approved", decided_by="ada")
    assert (again.resume_run_id, again.repeated) == (first.resume_run_id, True)
    with pytest.raises(AlreadyDecided):
        await decide(app.db, thread.thread_id, call_id, decision="rejected", decided_by="ada")
    with pytest.raises(NotFound):
        await decide(app.db, thread.thread_id, "no-such-call", decision="approved", decided_by="ada")


async def test_the_same_decision_at_once_from_four_processes_resumes_once_and_moves_money_once(
    core_factory: CoreFactory,
) -> None:
    script = paying()
    apps = [await core_factory(script) for _ in range(4)]
    thread, call_id = await paused(apps[0])
    decisions = await asyncio.gather(
        *(decide(a.db, thread.thread_id, call_id, decision="approved", decided_by="ada") for a in apps)
    )
    resume_ids = {d.resume_run_id for d in decisions}
    assert len(resume_ids) == 1
    [resume_id] = resume_ids
    assert resume_id is not None
    assert sum(not d.repeated for d in decisions) == 1
    # Every process tries to drive it: one does, the others find it taken.
    statuses = await asyncio.gather(*(run_step(a.runtime, resume_id) for a in apps))
    assert "completed" in statuses
    assert await moved(apps[0]) == [("bob", 2550)]
    async with apps[0].db.engine.connect() as connection:
        ledger = (await connection.execute(sa.text("SELECT count(*) FROM tool_executions"))).scalar_one()
    assert ledger == 1
    assert sum(e.type == "run_started" for e in await apps[0].log(thread)) == 2
