"""Errors in the step function, on the core tests' own app: transient model errors retried, final
failures, tools that raise or hang, a turn over its usage limits."""

from __future__ import annotations

import asyncio

import pytest
from inline_snapshot import snapshot
from pydantic_ai import RunContext, Tool
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelHTTPError,
    ModelRequestTimeout,
    ModelTimeoutError,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
)
from pydantic_ai.usage import UsageLimits

from agent import ModelRetries, Texts, ToolFailures
from agent.retries import is_transient
from stream import CollectingSink, transcript

from .core_app import CoreDeps, CoreFactory
from .scripted import Calls, FailAfter, Script, lines
from .step_app import shapes

pytestmark = pytest.mark.anyio

UNAVAILABLE = "The assistant is unavailable right now. Please try again in a moment."


def _overloaded() -> ModelHTTPError:
    return ModelHTTPError(503, "scripted", body={"error": "overloaded; upstream 10.0.0.5 stack trace"})


def _retries(delays: list[float], attempts: int = 4) -> ModelRetries:
    async def record(seconds: float) -> None:
        delays.append(seconds)

    return ModelRetries(attempts=attempts, base_delay=0.01, max_delay=0.03, jitter=0.5, sleep=record)


# -- model errors ------------------------------------------------------------------------------------


async def test_a_model_that_fails_twice_then_succeeds_completes(core_factory: CoreFactory) -> None:
    script = Script([_overloaded(), ModelHTTPError(429, "scripted"), "Hello after two failures."])
    delays: list[float] = []
    app = await core_factory(script, model_retries=_retries(delays))
    thread = await app.thread()
    sink = CollectingSink()
    await app.send(thread, "hi", sink=sink)
    assert transcript(sink.events)[-1] == "core: run_finished completed output='Hello after two failures.'"
    assert len(script.requests) == 3
    # Exponential backoff, less up to half of it as jitter, within the cap.
    assert len(delays) == 2
    assert 0.005 <= delays[0] <= 0.01
    assert 0.01 <= delays[1] <= 0.02
    assert shapes(await app.messages(thread)) == ["request: user-prompt", "response: text"]


async def test_a_model_that_always_fails_ends_the_run_failed_at_its_last_checkpoint(
    core_factory: CoreFactory,
) -> None:
    # The first request succeeds (a lookup), every later one fails.
    script = Script([Calls([("lookup", {"key": "plan"})])], then=_overloaded())
    delays: list[float] = []
    app = await core_factory(script, model_retries=_retries(delays, attempts=3))
    thread = await app.thread()
    sink = CollectingSink()
    run_id = await app.send(thread, "Which plan am I on?", sink=sink)
    assert transcript(sink.events)[-1] == snapshot(
        "core: run_finished failed error='The assistant is unavailable right now. Please try again in a moment.'"
    )
    assert len(script.requests) == 1 + 3
    assert len(delays) == 2
    run = await app.db.runs.get(run_id)
    assert run.status == "failed"
    assert run.error is not None
    assert run.error.startswith("ModelHTTPError: status_code: 503")
    assert (await app.db.threads.get(thread.thread_id)).status == "failed"
    # The conversation is what the last checkpoint stored: whole steps (the lookup's result, which
    # was shown, with them), nothing of the failed request.
    assert shapes(await app.messages(thread)) == snapshot(
        ["request: user-prompt", "response: tool-call(lookup)", "request: tool-return(lookup)"]
    )
    assert "10.0.0.5" not in str(await app.log(thread))
    # The thread stays usable: the next message closes the open call and is answered.
    script.then = "The model is back."
    second = CollectingSink()
    await app.send(thread, "hello?", sink=second)
    assert transcript(second.events)[-1] == "core: run_finished completed output='The model is back.'"
    assert (await app.db.threads.get(thread.thread_id)).status == "idle"


async def test_a_request_the_provider_rejects_is_not_retried(core_factory: CoreFactory) -> None:
    script = Script([ModelHTTPError(400, "scripted", body="bad request")], then="unused")
    delays: list[float] = []
    app = await core_factory(script, model_retries=_retries(delays))
    thread = await app.thread()
    sink = CollectingSink()
    await app.send(thread, "hi", sink=sink)
    assert transcript(sink.events)[-1] == snapshot(
        "core: run_finished failed error='The assistant hit an unexpected problem and stopped. Please try again.'"
    )
    assert (len(script.requests), delays) == (1, [])


async def test_a_stream_that_fails_after_output_is_not_retried(core_factory: CoreFactory) -> None:
    # Its text already reached the client: sending the request again would repeat it.
    script = Script([FailAfter("Half an ans", _overloaded())], then="unused")
    delays: list[float] = []
    app = await core_factory(script, model_retries=_retries(delays))
    thread = await app.thread()
    sink = CollectingSink()
    await app.send(thread, "hi", sink=sink)
    assert transcript(sink.events)[-1] == f"core: run_finished failed error={UNAVAILABLE!r}"
    assert (len(script.requests), delays) == (1, [])
    assert await app.messages(thread) == []


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (ModelHTTPError(429, "m"), True),
        (ModelHTTPError(500, "m"), True),
        (ModelHTTPError(503, "m"), True),
        (ModelHTTPError(408, "m"), True),
        (ModelHTTPError(400, "m"), False),
        (ModelHTTPError(401, "m"), False),
        (ModelTimeoutError("m", "read timed out"), True),
        (ModelRequestTimeout("m", 30.0), True),
        (TimeoutError(), True),
        (ModelAPIError("m", "unknown"), False),
        (UnexpectedModelBehavior("nonsense"), False),
    ],
)
def test_which_errors_are_transient(error: Exception, transient: bool) -> None:
    assert is_transient(error) is transient


def test_backoff_is_bounded_and_honours_retry_after() -> None:
    retries = ModelRetries(base_delay=1.0, max_delay=4.0, jitter=0.0)
    assert [retries.delay(n, TimeoutError()) for n in range(1, 6)] == [1.0, 2.0, 4.0, 4.0, 4.0]
    asked = ModelHTTPError(429, "m", headers={"retry-after": "3"})
    assert retries.delay(1, asked) == 3.0
    assert retries.delay(1, ModelHTTPError(429, "m", headers={"retry-after": "60"})) == 4.0


# -- tools -------------------------------------------------------------------------------------------


async def explode(ctx: RunContext[CoreDeps], order_id: str) -> str:
    """Look up the order's warehouse."""
    raise RuntimeError(f"connection to warehouse failed, password=hunter2 ({order_id})")


async def hang(ctx: RunContext[CoreDeps], order_id: str) -> str:
    """Look up the order's courier."""
    await asyncio.sleep(3600)
    return "never"


async def test_a_tool_that_raises_becomes_a_failed_result_and_the_run_goes_on(
    core_factory: CoreFactory,
) -> None:
    script = Script([Calls([("explode", {"order_id": "ORD-5678"})]), "The warehouse lookup is down."])
    app = await core_factory(script, tools=[Tool(explode)])
    thread = await app.thread()
    sink = CollectingSink()
    await app.send(thread, "Which warehouse has ORD-5678?", sink=sink)
    assert lines(sink.events)[2:] == snapshot(
        [
            "core: tool_call explode {'order_id': 'ORD-5678'}",
            "core: tool_result explode failed 'The tool explode failed unexpectedly. Tell the user it is unavailable right now and offer to try again later.'",
            "core: text part: 'The warehouse lookup is down.'",
            "core: text_done part 'The warehouse lookup is down.'",
            "core: run_finished completed output='The warehouse lookup is down.'",
        ]
    )
    assert "hunter2" not in str(await app.messages(thread))
    assert "hunter2" not in str(script.requests)
    assert shapes(await app.messages(thread)) == snapshot(
        [
            "request: user-prompt",
            "response: tool-call(explode)",
            "request: tool-return(explode)",
            "response: text",
        ]
    )


async def test_a_tool_that_hangs_is_cut_off_by_its_timeout(core_factory: CoreFactory) -> None:
    script = Script([Calls([("hang", {"order_id": "ORD-5678"})]), "The courier lookup is slow today."])
    app = await core_factory(script, tools=[Tool(hang)], tool_timeout=0.2)
    thread = await app.thread()
    sink = CollectingSink()
    await app.send(thread, "Who delivers ORD-5678?", sink=sink)
    assert lines(sink.events)[2:] == snapshot(
        [
            "core: tool_call hang {'order_id': 'ORD-5678'}",
            "core: tool_result hang failed 'The tool hang did not answer within 0.2 seconds and was stopped. Tell the user it is unavailable right now and offer to try again later.'",
            "core: text part: 'The courier lookup is slow today.'",
            "core: text_done part 'The courier lookup is slow today.'",
            "core: run_finished completed output='The courier lookup is slow today.'",
        ]
    )


async def test_the_same_hanging_tool_twice_is_still_no_crash(core_factory: CoreFactory) -> None:
    # pydantic-ai's own tool timeout is a retry the model can exhaust; a failed result is not.
    call = Calls([("hang", {"order_id": "ORD-5678"})])
    script = Script([call, call, call, "I could not reach the courier."])
    app = await core_factory(script, tools=[Tool(hang)], tool_timeout=0.05)
    thread = await app.thread()
    sink = CollectingSink()
    await app.send(thread, "Who delivers ORD-5678?", sink=sink)
    assert [e.outcome for e in sink.events if e.type == "tool_result"] == ["failed"] * 3
    assert (
        transcript(sink.events)[-1] == "core: run_finished completed output='I could not reach the courier.'"
    )


def test_approved_calls_are_never_cut_off_by_default() -> None:
    # A human sanctioned the side effect; a timeout after it acted would misreport it.
    failures = ToolFailures(timeout=5.0, timeouts={"slow_report": 60.0, "never": None})
    assert failures.timeout_of("transfer", approved=True) is None
    assert failures.timeout_of("transfer") == 5.0
    assert failures.timeout_of("lookup") == 5.0
    assert failures.timeout_of("slow_report", approved=True) == 60.0
    assert failures.timeout_of("never") is None


# -- usage limits ------------------------------------------------------------------------------------


async def test_a_turn_over_its_limits_ends_gracefully_and_the_thread_stays_usable(
    core_factory: CoreFactory,
) -> None:
    script = Script([], then=Calls([("lookup", {"key": "plan"})]))
    app = await core_factory(script, usage_limits=UsageLimits(request_limit=3))
    thread = await app.thread()
    sink = CollectingSink()
    await app.send(thread, "Which plan am I on?", sink=sink)
    assert transcript(sink.events)[-1] == f"core: run_finished completed output={Texts().turn_limit!r}"
    assert len(script.requests) == 3
    assert shapes(await app.messages(thread))[-1] == "response: text"
    script.then = "Hello again."
    second = CollectingSink()
    await app.send(thread, "hello", sink=second)
    assert transcript(second.events)[-1] == "core: run_finished completed output='Hello again.'"


async def spend(ctx: RunContext[CoreDeps], order_id: str) -> str:
    """Ask a sub-agent about the order."""
    raise UsageLimitExceeded("The next request would exceed the request_limit of 12")


async def test_a_sub_agent_over_the_turns_limit_ends_the_turn_politely(core_factory: CoreFactory) -> None:
    # A sub-agent that shares the turn's usage (`usage=ctx.usage`) hits the turn's limit, not a tool failure.
    script = Script([Calls([("spend", {"order_id": "ORD-5678"})])], then="unused")
    app = await core_factory(script, tools=[Tool(spend)])
    thread = await app.thread()
    sink = CollectingSink()
    await app.send(thread, "Ask around about ORD-5678", sink=sink)
    assert transcript(sink.events)[-1] == f"core: run_finished completed output={Texts().turn_limit!r}"
    assert len(script.requests) == 1
    assert shapes(await app.messages(thread)) == snapshot(
        [
            "request: user-prompt",
            "response: tool-call(spend)",
            "request: tool-return(spend)",
            "response: text",
        ]
    )
