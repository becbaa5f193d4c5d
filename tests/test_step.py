"""The step function over a real database, on the core tests' own app: what is streamed and stored,
checkpoints, one run at a time, a turn's usage limits. Approvals: `test_approvals`; crashes:
`test_step_recovery`; the demo shop through the step: `test_shop`."""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import pytest
from inline_snapshot import snapshot
from pydantic_ai.messages import ModelRequest

from agent import RuntimeOptions, Texts, run_step
from agent.checkpointing import RunCheckpoints
from agent.eventlog import EventLogSink
from agent.runtime import QUIET_RUNS
from store import Checkpoint, NewRun, NotFound, RunActive, StoreError
from stream import CollectingSink, RunFinished, StreamEvent, transcript

from .core_app import CoreFactory
from .scripted import Calls, Script, lines
from .step_app import App, Crash, CrashingSink, crash_then_recover, shapes

pytestmark = pytest.mark.anyio

LOOKUP = Calls([("lookup", {"key": "plan"})])


async def test_a_reply_streams_word_by_word_and_is_stored(core_factory: CoreFactory) -> None:
    app = await core_factory(
        Script(["Hello! I can look things up for you, and move money once you approve."])
    )
    thread = await app.thread()
    sink = CollectingSink()
    await app.send(thread, "Hello there", sink=sink)
    deltas = [e for e in sink.events if e.type == "text_delta"]
    assert len(deltas) > 3
    assert transcript(sink.events)[:2] == ["core: run_started message", "core: user_message 'Hello there'"]
    assert transcript(sink.events)[-1].startswith("core: run_finished completed")
    # What was streamed live is exactly what the log replays.
    assert await app.log(thread) == sink.events
    assert shapes(await app.messages(thread)) == snapshot(["request: user-prompt", "response: text"])
    assert (await app.db.threads.get(thread.thread_id)).status == "idle"


async def test_a_tool_call_and_its_result_are_streamed_then_answered(core_factory: CoreFactory) -> None:
    app = await core_factory(Script([LOOKUP, "You are on the plan for acme."]), tenant="acme")
    thread = await app.thread()
    sink = CollectingSink()
    await app.send(thread, "Which plan am I on?", sink=sink)
    assert lines(sink.events) == snapshot(
        [
            "core: run_started message",
            "core: user_message 'Which plan am I on?'",
            "core: tool_call lookup {'key': 'plan'}",
            "core: tool_result lookup success 'plan for acme (user alice)'",
            "core: text part: 'You are on the plan for acme.'",
            "core: text_done part 'You are on the plan for acme.'",
            "core: run_finished completed output='You are on the plan for acme.'",
        ]
    )


async def test_a_turn_leaves_its_step_to_reference_counting_not_the_collector(
    core_factory: CoreFactory,
) -> None:
    # The step's own cycles are broken at its end (`_Step.close`, `EventLogSink.aclose`): none of
    # its objects is among what the collector finds unreachable after a turn.
    app = await core_factory(Script([LOOKUP, "Found it.", LOOKUP, "Still."]))
    thread = await app.thread()
    await app.send(thread, "Which plan am I on?")  # a first turn builds what lives on (caches)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        await app.send(thread, "And now?")
        gc.collect()
        left = [type(o).__name__ for o in gc.garbage if isinstance(o, RunCheckpoints | EventLogSink)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []


async def test_nothing_of_a_run_outlives_its_turn(core_factory: CoreFactory) -> None:
    # Nor through the database driver: asyncpg expired each statement it prepared with a timer that
    # kept the context of the task preparing it, a run's, with its scope and checkpoints, for 300 s.
    app = await core_factory(Script([LOOKUP, "Found it."]))
    thread = await app.thread()
    await app.send(thread, "Which plan am I on?")  # a new engine: its statements are prepared in this run
    gc.collect()
    alive = [
        o for o in gc.get_objects() if isinstance(o, RunCheckpoints) and o.run.thread_id == thread.thread_id
    ]
    assert alive == []


async def test_one_run_at_a_time_and_idempotency_keys(core_factory: CoreFactory) -> None:
    app = await core_factory(Script([], then="Hi."))
    thread = await app.thread()
    keyed = NewRun(thread_id=thread.thread_id, kind="message", content="hi", idempotency_key="k1")
    first = await app.db.runs.queue(keyed)
    run, created = first.run, first.created
    second = await app.db.runs.queue(keyed)
    again, created_again = second.run, second.created
    assert (created, created_again, again.run_id) == (True, False, run.run_id)
    with pytest.raises(RunActive):
        await app.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="another"))
    await run_step(app.runtime, run.run_id)
    late = await app.db.runs.queue(keyed)
    done, created_late = late.run, late.created
    assert (done.run_id, created_late, done.status) == (run.run_id, False, "completed")


async def test_checkpoints_store_messages_as_pydantic_ai_finished_them(core_factory: CoreFactory) -> None:
    app = await core_factory(Script([LOOKUP, "Found it."]))
    thread = await app.thread()
    run_id = await app.send(thread, "Which plan am I on?")
    stored = await app.messages(thread)
    assert shapes(stored) == [
        "request: user-prompt",
        "response: tool-call(lookup)",
        "request: tool-return(lookup)",
        "response: text",
    ]
    # pydantic-ai stamps a request as it sends it (instructions, timestamp, run id): a checkpoint
    # taken before that would have stored the request without them.
    for message in stored:
        assert message.run_id == f"{run_id}.1"
        if isinstance(message, ModelRequest):
            assert message.instructions == "You are a test assistant."
            assert message.timestamp is not None


async def test_a_looping_turn_ends_politely_at_its_limit_and_the_thread_stays_usable(
    core_factory: CoreFactory,
) -> None:
    # The app's default limits: a model that calls a tool after every result loops.
    script = Script([], then=LOOKUP)
    app = await core_factory(script)
    thread = await app.thread()
    sink = CollectingSink()
    await app.send(thread, "Look it up again and again", sink=sink)
    assert transcript(sink.events)[-1] == f"core: run_finished completed output={Texts().turn_limit!r}"
    assert sum(1 for e in sink.events if e.type == "tool_call") >= 5
    # The next message works: no dangling tool call blocks it.
    script.then = "Hello again."
    second = CollectingSink()
    await app.send(thread, "hello", sink=second)
    assert transcript(second.events)[-1] == "core: run_finished completed output='Hello again.'"


async def test_usage_limits_count_each_turn_not_the_whole_conversation(core_factory: CoreFactory) -> None:
    app = await core_factory(Script([LOOKUP, "Found it."] * 8))
    thread = await app.thread()
    for _ in range(8):  # 16 model requests in all: more than one turn's limit of 12
        sink = CollectingSink()
        await app.send(thread, "Which plan am I on?", sink=sink)
        assert transcript(sink.events)[-1] == "core: run_finished completed output='Found it.'"


async def test_the_runtime_counts_the_runs_it_drives(core_factory: CoreFactory) -> None:
    # While few runs are in flight, a reply's first word is stored at once (`EventLogOptions.hurry`).
    app = await core_factory(Script([], then="Hello there, how can I help?"))
    first, second = await app.thread(), await app.thread()
    both_streaming, both_counted = asyncio.Event(), asyncio.Event()
    arrived: list[int] = []
    seen: list[int] = []

    class Watching(CollectingSink):
        async def emit(self, event: StreamEvent) -> None:
            await super().emit(event)
            if event.type != "text_delta" or id(self) in arrived:
                return
            # Each run stops at its first word until both have reached theirs (one may reach it
            # before the other has started), and until both have read the count.
            arrived.append(id(self))
            if len(arrived) == 2:
                both_streaming.set()
            await both_streaming.wait()
            seen.append(app.runtime.running)
            if len(seen) == 2:
                both_counted.set()
            await both_counted.wait()

    assert app.runtime.running == 0
    await asyncio.gather(app.send(first, "Hi", sink=Watching()), app.send(second, "Hi", sink=Watching()))
    assert seen == [2, 2]
    assert app.runtime.running == 0
    with pytest.raises(NotFound):  # no such run: it ends at once, counted out all the same
        await run_step(app.runtime, "no-such-run")
    assert app.runtime.running == 0


async def test_a_replys_first_word_is_published_at_once_while_the_process_is_quiet(
    core_factory: CoreFactory,
) -> None:
    # The event writer waits an hour between its transactions: a first word published before the
    # run's end was stored at once, not taken by the run's last checkpoint. (The tool's call and
    # result are published by the checkpoint that stores them, before the model is asked again:
    # the writer waiting its hour, the call waits for it too.)
    app = await core_factory(
        Script([LOOKUP, "You are on the plan for acme."]),
        tenant="acme",
        options=RuntimeOptions(event_interval=3600),
    )
    batches: list[list[str]] = []
    app.runtime.publish = lambda thread_id, events: batches.append([s.event.type for s in events])
    quiet: list[bool] = []
    insert = app.runtime.db.events.insert

    async def inserting(*args: Any, **named: Any) -> None:
        quiet.append(named["quiet"])
        await insert(*args, **named)

    app.runtime.db.events.insert = inserting  # the writer's transactions, as the runtime asks them
    await app.send(await app.thread(), "Which plan am I on?")
    assert set(quiet) == {True}  # one run: the writer's transactions run where they are quickest
    app.runtime.running = QUIET_RUNS + 1
    assert not app.runtime.quiet()
    app.runtime.running = 0
    assert batches == snapshot(
        [
            ["run_started", "user_message"],
            ["tool_call", "tool_result"],
            ["text_delta"],
            [
                "text_delta",
                "text_delta",
                "text_delta",
                "text_delta",
                "text_delta",
                "text_delta",
                "text_done",
                "run_finished",
            ],
        ]
    )


async def test_a_busy_process_paces_its_event_writers_by_the_runs_it_drives(
    core_factory: CoreFactory,
) -> None:
    # Quiet: the interval. Busy: the interval times the runs per QUIET_RUNS, so that the process's
    # writers together commit about as often as a quiet one's, up to `busy_event_interval`; never
    # less than the interval.
    app = await core_factory(
        Script(["hello"]), options=RuntimeOptions(event_interval=0.05, busy_event_interval=0.25)
    )
    runtime = app.runtime
    paces: dict[int, float] = {}
    for running in (0, QUIET_RUNS, 2 * QUIET_RUNS, 4 * QUIET_RUNS, 100):
        runtime.running = running
        paces[running] = round(runtime.event_pace(), 6)
    runtime.running = 0
    assert paces == {0: 0.05, QUIET_RUNS: 0.05, 2 * QUIET_RUNS: 0.1, 4 * QUIET_RUNS: 0.2, 100: 0.25}
    slow = await core_factory(Script(["hello"]), options=RuntimeOptions(event_interval=3600))
    slow.runtime.running = 100
    assert slow.runtime.event_pace() == 3600  # the cap never shortens the interval itself
    slow.runtime.running = 0


async def test_a_run_crashing_as_it_ends_leaves_no_end_stored_and_ends_once_when_recovered(
    core_factory: CoreFactory,
) -> None:
    # The process dies after the run announced its end, the event writer having had every chance
    # to store it, before the end's transaction: no end is stored (the run is not completed), and
    # the run, recovered, ends once.
    async def open_app() -> App:
        return await core_factory(Script(["All done."], then="All done."))

    first = await open_app()
    thread = await first.thread()
    run = (await first.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Hi"))).run

    class WritersDoneThenCrash(CrashingSink):
        async def emit(self, event: StreamEvent) -> None:
            await super().emit(event)
            if event.type == "run_finished":
                writers = [t for t in asyncio.all_tasks() if t.get_name().startswith("event-log ")]
                if writers:
                    await asyncio.wait(writers)
                assert [e.type for e in await first.log(thread)].count("run_finished") == 0
                raise Crash

    recovered = await crash_then_recover(open_app, run.run_id, WritersDoneThenCrash())
    kinds = [e.type for e in await recovered.log(thread)]
    assert (kinds.count("run_finished"), kinds[-1]) == (1, "run_finished")
    end = (await recovered.log(thread))[-1]
    assert isinstance(end, RunFinished)
    assert (end.status, end.output) == ("completed", "All done.")


async def test_a_run_whose_end_fails_to_commit_is_stored_and_shown_failed_alone(
    core_factory: CoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app = await core_factory(Script([LOOKUP, "You are on the plan for acme."]), tenant="acme")
    published: list[StreamEvent] = []
    app.runtime.publish = lambda thread_id, events: published.extend(s.event for s in events)
    save_with = app.db.conversations.save_with

    async def failing(conversation: Any, *, checkpoint: Checkpoint | None = None, **named: Any) -> Any:
        if checkpoint is not None and checkpoint.finish == "completed":
            raise StoreError("the database refused the end's commit")
        return await save_with(conversation, checkpoint=checkpoint, **named)

    app.db.conversations.save_with = failing
    thread = await app.thread()
    with caplog.at_level(logging.CRITICAL, logger="agent.step"):  # the failure is logged: expected
        run_id = await app.send(thread, "Which plan am I on?")
    assert (await app.db.runs.get(run_id)).status == "failed"
    stored = await app.log(thread)
    ends = [e for e in stored if isinstance(e, RunFinished)]
    assert [(e.status, e.output) for e in ends] == [("failed", None)]
    assert stored[-1] == ends[0]
    assert published == stored  # what clients saw live is what is stored


async def test_a_run_whose_event_log_fails_still_ends_failed(
    core_factory: CoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app = await core_factory(Script(["Hello! I can look things up for you."]))

    async def refusing(*args: Any, **named: Any) -> None:
        raise StoreError("the database refused the events")

    app.runtime.db.events.insert = refusing  # the event writer's transactions
    thread = await app.thread()
    with caplog.at_level(logging.CRITICAL, logger="agent.step"):  # the failure is logged: expected
        run_id = await app.send(thread, "Hello there")
    assert (await app.db.runs.get(run_id)).status == "failed"
    assert "run_finished" not in [e.type for e in await app.log(thread)]
