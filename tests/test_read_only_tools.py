"""A tool step is not checkpointed before its tools run, unless one does something keyed by its call.

On the core tests' own app: a step calling `lookup` (which touches nothing keyed by its call) is
stored with its result, by the checkpoint before the next request, whether the app declares it
read-only (`ChatApp.read_only_tools`) or not; a side effect through the ledger is checkpointed
before it runs; a crash before the lookup's result was stored asks the model again; a stopping
runtime checkpoints at once; a resumed side effect's result is stored before the model is asked
again, whatever it calls next.
"""

from __future__ import annotations

import asyncio

import pytest
from inline_snapshot import snapshot

from agent import decide, run_step
from store import NewRun
from stream import CollectingSink, RunStarted, StreamEvent, ToolCall

from .core_app import CoreFactory, FakeApi
from .scripted import Calls, Script
from .step_app import CrashingSink, crash_then_recover, shapes

pytestmark = pytest.mark.anyio

READ_ONLY = frozenset({"lookup"})
LOOKUP = Calls([("lookup", {"key": "balance"})])


@pytest.mark.parametrize("lookups", [1, 3])
async def test_a_step_calling_only_read_only_tools_is_stored_by_the_next_checkpoint(
    core_factory: CoreFactory, lookups: int
) -> None:
    ran: dict[str, tuple[int, list[str], list[str]]] = {}
    for name, read_only in (("as written", frozenset[str]()), ("read-only", READ_ONLY)):
        app = await core_factory(Script([*[LOOKUP] * lookups, "Done."]), read_only_tools=read_only)
        thread = await app.thread()
        run_id = await app.send(thread, "Balance?")
        run = await app.db.runs.get(run_id)
        assert run.status == "completed"
        kinds = [event.type for event in await app.log(thread)]
        ran[name] = (run.checkpoints, shapes(await app.messages(thread)), kinds)
    # The same conversation and events, in as few checkpoints, declared or not: each step's call
    # and result in one (before the next request), not its call first; then the run's end.
    assert ran["read-only"] == ran["as written"]
    assert {name: checkpoints for name, (checkpoints, _, _) in ran.items()} == (
        snapshot({"as written": 2, "read-only": 2})
        if lookups == 1
        else snapshot({"as written": 4, "read-only": 4})
    )


async def test_a_side_effect_is_checkpointed_before_it_runs_with_the_lookups_before_it(
    core_factory: CoreFactory,
) -> None:
    api = FakeApi(hang=asyncio.Event())
    app = await core_factory(
        Script([LOOKUP, Calls([("book", {"item": "a room"})]), "Booked."]), api=api, read_only_tools=READ_ONLY
    )
    thread = await app.thread()
    run = (
        await app.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Book a room"))
    ).run
    task = asyncio.create_task(run_step(app.runtime, run.run_id))
    await asyncio.wait_for(api.called.wait(), 30)
    # The booking is under way: the lookup's step and the booking's call were stored before it.
    assert shapes(await app.messages(thread)) == snapshot(
        [
            "request: user-prompt",
            "response: tool-call(lookup)",
            "request: tool-return(lookup)",
            "response: tool-call(book)",
        ]
    )
    assert api.hang is not None
    api.hang.set()
    assert await asyncio.wait_for(task, 30) == "completed"
    # The lookup's call and result; the booking's call; its result; the end.
    assert (await app.db.runs.get(run.run_id)).checkpoints == 4


async def test_a_crash_after_a_read_only_step_asks_the_model_again(core_factory: CoreFactory) -> None:
    reference = await core_factory(Script([LOOKUP, "Done."]))
    clean = await reference.thread()
    await reference.send(clean, "Balance?")
    script = Script([LOOKUP, LOOKUP, "Done."])
    app = await core_factory(script, read_only_tools=READ_ONLY)
    thread = await app.thread()
    run = (
        await app.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Balance?"))
    ).run
    # Dies once the lookup answered, before any checkpoint stored its step.
    sink = CrashingSink(on=lambda e: e.type == "tool_result")
    recovered = await crash_then_recover(
        lambda: core_factory(script, read_only_tools=READ_ONLY), run.run_id, sink
    )
    # Started over: the model was asked again with the user's message alone, and called the
    # lookup again, under a new id; the conversation is an uninterrupted run's.
    assert len(script.requests) == 3
    assert shapes(script.requests[1]) == ["request: user-prompt"]
    assert shapes(await recovered.messages(thread)) == shapes(await reference.messages(clean))
    log = await recovered.log(thread)
    recover = next(i for i, e in enumerate(log) if isinstance(e, RunStarted) and e.kind == "recover")
    after = [e.type for e in log[recover + 1 :]]
    assert after[:2] == ["tool_call", "tool_result"]
    assert after[-1] == "run_finished"
    # What the first attempt had stored stays, as every client saw it: the recovery's call is another.
    before = [e.type for e in log[:recover]]
    assert before in (["run_started", "user_message"], ["run_started", "user_message", "tool_call"])
    calls = [e.tool_call_id for e in log if isinstance(e, ToolCall)]
    assert len(calls) == len(set(calls))


async def test_a_stopping_runtime_checkpoints_a_read_only_step_before_it_parks(
    core_factory: CoreFactory,
) -> None:
    script = Script([LOOKUP, "Done."])
    app = await core_factory(script, read_only_tools=READ_ONLY)
    thread = await app.thread()
    run = (
        await app.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Balance?"))
    ).run

    class StopOnToolResult(CollectingSink):
        async def emit(self, event: StreamEvent) -> None:
            await super().emit(event)
            if event.type == "tool_result":
                app.runtime.stopping.set()

    assert await run_step(app.runtime, run.run_id, sink=StopOnToolResult()) == "queued"
    assert (await app.db.runs.get(run.run_id)).checkpoints == 1
    # The next process continues from that checkpoint: the model is not asked for the lookup again.
    restarted = await core_factory(script, read_only_tools=READ_ONLY)
    assert await run_step(restarted.runtime, run.run_id) == "completed"
    assert len(script.requests) == 2
    assert shapes(await restarted.messages(thread)) == snapshot(
        [
            "request: user-prompt",
            "response: tool-call(lookup)",
            "request: tool-return(lookup)",
            "response: text",
        ]
    )


async def test_a_resumed_side_effects_result_is_stored_before_the_model_is_asked_again(
    core_factory: CoreFactory,
) -> None:
    script = Script([Calls([("transfer", {"to": "bob", "amount": 25.5})]), LOOKUP, "Sent."])
    app = await core_factory(script, read_only_tools=READ_ONLY)
    thread = await app.thread()
    await app.send(thread, "Send bob 25.50")
    [call_id] = await app.pending(thread)
    decision = await decide(app.db, thread.thread_id, call_id, decision="approved", decided_by="bob")
    assert decision.resume_run_id is not None
    assert await run_step(app.runtime, decision.resume_run_id) == "completed"
    # The transfer's result, stored as the model was asked again; the lookup's call and result,
    # stored together; the run's end.
    assert (await app.db.runs.get(decision.resume_run_id)).checkpoints == 3
    assert shapes(await app.messages(thread))[-4:] == snapshot(
        [
            "request: tool-return(transfer)",
            "response: tool-call(lookup)",
            "request: tool-return(lookup)",
            "response: text",
        ]
    )
