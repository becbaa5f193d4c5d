"""The step function when a run dies, is cancelled or is stopped: it continues from its checkpoint.

On the core tests' own app: a turn looks a balance up, then asks to transfer money (which needs
approval); the transfer is exactly-once by the ledger.
"""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa
from inline_snapshot import snapshot

from agent import decide, run_step
from store import NewRun
from stream import CollectingSink, StreamEvent

from .core_app import CoreFactory, moved
from .scripted import Calls, Script
from .step_app import CrashingSink, crash_then_recover, shapes

pytestmark = pytest.mark.anyio

ASK = "Send bob 25.50"


def paying() -> Script:
    """Looks the balance up, asks to send bob 25.50, and answers once it is decided."""
    return Script(
        [
            Calls([("lookup", {"key": "balance"})]),
            Calls([("transfer", {"to": "bob", "amount": 25.5})]),
            "Sent.",
        ]
    )


@pytest.mark.parametrize("at_flush", [1])
async def test_a_run_killed_between_nodes_continues_from_its_checkpoint(
    core_factory: CoreFactory, at_flush: int
) -> None:
    # The lookup's call and result are stored by one checkpoint, before the model is asked again
    # (the run's second and last before its pause): the crash lands right after it.
    reference = await core_factory(paying())
    clean = await reference.thread()
    await reference.send(clean, ASK)
    script = paying()
    app = await core_factory(script)
    thread = await app.thread()
    run = (await app.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content=ASK))).run
    sink = CrashingSink(at_flush=at_flush)
    recovered = await crash_then_recover(lambda: core_factory(script), run.run_id, sink)
    # No message lost, none repeated: the same history as a run that never crashed, and the model
    # asked each of its two questions once.
    assert shapes(await recovered.messages(thread)) == shapes(await reference.messages(clean))
    assert len(script.requests) == 2
    assert len(await recovered.pending(thread)) == 1
    kinds = [e.type for e in await recovered.log(thread)]
    assert kinds.count("approval_required") == 1
    assert kinds.count("run_started") == 2


async def test_a_resume_killed_after_the_transfer_does_not_transfer_twice(core_factory: CoreFactory) -> None:
    script = paying()
    app = await core_factory(script)
    thread = await app.thread()
    await app.send(thread, ASK)
    [call_id] = await app.pending(thread)
    decision = await decide(app.db, thread.thread_id, call_id, decision="approved", decided_by="bob")
    assert decision.resume_run_id is not None
    # Dies right after the transfer committed, before any checkpoint recorded it in the conversation.
    sink = CrashingSink(on=lambda e: e.type == "tool_result")
    recovered = await crash_then_recover(lambda: core_factory(script), decision.resume_run_id, sink)
    assert await moved(recovered) == [("bob", 2550)]
    assert shapes(await recovered.messages(thread))[-2:] == [
        "request: tool-return(transfer)",
        "response: text",
    ]
    async with recovered.db.engine.connect() as connection:
        ledger = (await connection.execute(sa.text("SELECT count(*) FROM tool_executions"))).scalar_one()
    assert ledger == 1


async def test_a_cancelled_run_is_requeued_and_continues(core_factory: CoreFactory) -> None:
    app = await core_factory(paying())
    thread = await app.thread()
    run = (await app.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content=ASK))).run
    tool_called = asyncio.Event()

    class SignallingSink(CollectingSink):
        async def emit(self, event: StreamEvent) -> None:
            await super().emit(event)
            if event.type == "tool_result":
                tool_called.set()

    task = asyncio.create_task(run_step(app.runtime, run.run_id, sink=SignallingSink()))
    await tool_called.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await app.db.runs.get(run.run_id)).status == "queued"
    assert (await app.db.runs.get(run.run_id)).checkpoints == 0
    assert await run_step(app.runtime, run.run_id) == "awaiting_approval"
    # Cancelled before the lookup's step was stored (its call waits for its result's checkpoint,
    # the lookup touching nothing keyed by its call): the model is asked again, and the script's
    # next answer is the transfer.
    assert shapes(await app.messages(thread)) == snapshot(
        [
            "request: user-prompt",
            "response: tool-call(transfer)",
        ]
    )


async def test_a_stopping_runtime_parks_runs_at_their_next_checkpoint(core_factory: CoreFactory) -> None:
    reference = await core_factory(paying())
    clean = await reference.thread()
    await reference.send(clean, ASK)
    script = paying()
    app = await core_factory(script)
    thread = await app.thread()
    run = (await app.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content=ASK))).run

    class StopOnToolResult(CollectingSink):
        async def emit(self, event: StreamEvent) -> None:
            await super().emit(event)
            if event.type == "tool_result":
                app.runtime.stopping.set()  # shutdown begins while the lookup's result comes in

    assert await run_step(app.runtime, run.run_id, sink=StopOnToolResult()) == "queued"
    parked = await app.db.runs.get(run.run_id)
    # The lookup's call with its result, stored as the request the next process sends, in one checkpoint.
    assert (parked.status, parked.checkpoints) == ("queued", 1)
    assert shapes(await app.messages(thread))[-1] == "request: tool-return(lookup)"
    # The next process continues it from that checkpoint: it sends that request, runs no lookup.
    restarted = await core_factory(script)
    assert await run_step(restarted.runtime, run.run_id) == "awaiting_approval"
    assert shapes(await restarted.messages(thread)) == shapes(await reference.messages(clean))
    assert len(script.requests) == 2
