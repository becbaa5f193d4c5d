"""Structured output and approval metadata as the step streams and stores them, on SQLite and PostgreSQL.

What every client builds on: `run_finished` names a structured output's type (a union's member,
too), the output tool call gets its `tool_result` (a retried one too, so none is left dangling),
and a held call keeps what its tool said about it, JSON-safe, without durable-chat's own keys.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, TypedDict

import pytest
from inline_snapshot import snapshot
from pydantic import BaseModel
from pydantic_ai import ApprovalRequired, ModelRetry, RunContext, Tool, ToolOutput

from agent import ApprovalReview, ChatApp, Runtime, decide, open_runtime, run_step
from agent.outputs import call_metadata, run_output
from store import NewRun, PendingCall, Thread, insert_pending
from stream import CollectingSink, RunFinished

from .core_app import CoreDeps, core_app
from .scripted import Calls, Script, lines

pytestmark = pytest.mark.anyio


class NoFlightFound(BaseModel):
    """No flight matches."""


class Failed(BaseModel):
    """The search failed."""


class Flight(BaseModel):
    number: str
    seats: int


@dataclass
class Seat:
    row: int
    letter: str


class Booking(TypedDict):
    reference: str


class Refund(TypedDict):
    amount: float


@pytest.fixture
async def opened(database_url: str) -> AsyncIterator[Any]:
    async with AsyncExitStack() as stack:

        async def open_app(app: ChatApp[Any]) -> Runtime:
            return await stack.enter_async_context(open_runtime(app, database_url))

        yield open_app


async def send(runtime: Runtime, thread: Thread, content: str) -> tuple[list[str], RunFinished]:
    run = (
        await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content=content))
    ).run
    sink = CollectingSink()
    await run_step(runtime, run.run_id, sink=sink)
    finished = sink.events[-1]
    assert isinstance(finished, RunFinished)
    return lines(sink.events), finished


async def test_each_member_of_a_union_output_is_named(opened: Any) -> None:
    script = Script([Calls([("final_result_NoFlightFound", {})]), Calls([("final_result_Failed", {})])])
    runtime = await opened(core_app(script, output_type=[NoFlightFound, Failed]))
    thread = await runtime.db.threads.create(user_id="ada", title="t")

    first, finished = await send(runtime, thread, "Flights to Lisbon?")
    second, _ = await send(runtime, thread, "And to Porto?")

    assert first[2:] == snapshot(
        [
            "core: tool_call final_result_NoFlightFound {}",
            "core: tool_result final_result_NoFlightFound success 'Final result processed.'",
            "core: run_finished completed output={} output_type=NoFlightFound",
        ]
    )
    assert second[-1] == snapshot("core: run_finished completed output={} output_type=Failed")
    assert finished.output_tool_call_id == "call_1_0_final_result_NoFlightFound"


async def test_a_retried_output_call_gets_its_retry_as_its_result(opened: Any) -> None:
    # The model's first output misses a field: pydantic-ai asks again, and the call is closed with that.
    script = Script(
        [
            Calls([("final_result", {"number": "TP123"})]),
            Calls([("final_result", {"number": "TP123", "seats": 2})]),
        ]
    )
    runtime = await opened(core_app(script, output_type=Flight))
    thread = await runtime.db.threads.create(user_id="ada", title="t")

    transcript, finished = await send(runtime, thread, "Book TP123")

    assert transcript[2:] == snapshot(
        [
            "core: tool_call final_result {'number': 'TP123'}",
            "core: tool_result final_result failed [{'type': 'missing', 'loc': ['seats'], 'msg': 'Field required', 'input': {'number': 'TP123'}}]",
            "core: tool_call final_result {'number': 'TP123', 'seats': 2}",
            "core: tool_result final_result success 'Final result processed.'",
            "core: run_finished completed output={'number': 'TP123', 'seats': 2} output_type=Flight",
        ]
    )
    assert finished.output_tool_call_id == "call_2_0_final_result"


async def test_an_output_function_that_asks_again_leaves_no_call_open(opened: Any) -> None:
    async def seat(ctx: RunContext[CoreDeps], flight: str) -> Seat:
        """Book a seat on `flight`."""
        if flight != "TP123":
            raise ModelRetry(f"no flight {flight}")
        return Seat(row=12, letter="C")

    script = Script([Calls([("seat", {"flight": "XX1"})]), Calls([("seat", {"flight": "TP123"})])])
    runtime = await opened(core_app(script, output_type=ToolOutput(seat, name="seat")))
    thread = await runtime.db.threads.create(user_id="ada", title="t")

    transcript, _ = await send(runtime, thread, "Book me a seat")

    assert transcript[2:] == snapshot(
        [
            "core: tool_call seat {'flight': 'XX1'}",
            "core: tool_result seat failed 'no flight XX1'",
            "core: tool_call seat {'flight': 'TP123'}",
            "core: tool_result seat success 'Final result processed.'",
            "core: run_finished completed output={'row': 12, 'letter': 'C'} output_type=Seat",
        ]
    )


async def test_a_text_output_has_no_type_and_no_output_call(opened: Any) -> None:
    runtime = await opened(core_app(Script(["Hello there."])))
    thread = await runtime.db.threads.create(user_id="ada", title="t")

    transcript, finished = await send(runtime, thread, "Hi")

    assert transcript[-1] == snapshot("core: run_finished completed output='Hello there.'")
    assert (finished.output_type, finished.output_tool_call_id) == (None, None)


def test_output_types_are_named_from_the_value_or_the_spec() -> None:
    assert run_output(Seat(1, "A"), Seat, "final_result").value == {"row": 1, "letter": "A"}
    named = {
        "model": run_output(Flight(number="TP1", seats=1), Flight, "final_result").type_name,
        "dataclass": run_output(Seat(1, "A"), [Seat, str], "final_result_Seat").type_name,
        "typed dict": run_output({"reference": "R1"}, Booking, "final_result").type_name,
        "union member": run_output({"amount": 5.0}, [Booking, Refund], "final_result_Refund").type_name,
        "named tool": run_output(
            {"reference": "R1"},
            [ToolOutput(Booking, name="booked"), ToolOutput(Refund, name="refunded")],
            "booked",
        ).type_name,
        "list": run_output([1, 2], list[int], "final_result").type_name,
        "number": run_output(3, int, "final_result").type_name,
        "text": run_output("hi", str, None).type_name,
    }
    assert named == snapshot(
        {
            "model": "Flight",
            "dataclass": "Seat",
            "typed dict": "Booking",
            "union member": "Refund",
            "named tool": "Booking",
            "list": "list",
            "number": "int",
            "text": None,
        }
    )
    assert run_output({"x": math.nan}, dict[str, float], None).value == {"x": None}


# -- approval metadata -----------------------------------------------------------------------------------


async def test_a_held_call_keeps_its_metadata_for_every_reader(opened: Any) -> None:
    async def wire(ctx: RunContext[CoreDeps], amount: float) -> str:
        """Wire `amount` abroad."""
        if not ctx.tool_call_approved:
            raise ApprovalRequired(
                metadata={"why": "abroad", "limit": 100, "ratio": math.inf, "checks": ["iban", "name"]}
            )
        return "wired"

    script = Script([Calls([("wire", {"amount": 250}), ("refund", {"amount": 400})]), "Done."])
    runtime = await opened(core_app(script, tools=[Tool(wire)]))
    thread = await runtime.db.threads.create(user_id="ada", title="t")

    transcript, _ = await send(runtime, thread, "Wire 250 and refund 400")

    assert transcript[-2] == snapshot(
        "core: approval_required [wire {'amount': 250} metadata={'why': 'abroad', 'limit': 100, 'ratio': None, 'checks': ['iban', 'name']}, refund {'amount': 400} metadata={'why': 'over 100'}]"
    )
    stored = {a.tool_name: a.metadata for a in await runtime.db.approvals.list(thread_id=thread.thread_id)}
    assert stored == snapshot(
        {
            "wire": {"why": "abroad", "limit": 100, "ratio": None, "checks": ["iban", "name"]},
            "refund": {"why": "over 100"},
        }
    )
    [wire, _] = await runtime.db.approvals.list(thread_id=thread.thread_id)
    decided = await decide(
        runtime.db, thread.thread_id, wire.tool_call_id, decision="approved", decided_by="ada"
    )
    assert decided.approval.metadata == {
        "why": "abroad",
        "limit": 100,
        "ratio": None,
        "checks": ["iban", "name"],
    }


def test_metadata_is_made_json_safe_and_durable_chats_own_is_never_shown() -> None:
    assert call_metadata({"durable_chat_outcome": "unknown", "started_at": "2026-01-01T00:00:00"}) is None
    assert call_metadata(None) is None
    assert call_metadata({}) is None
    assert call_metadata({1: -math.inf, "seat": Seat(3, "B"), "raw": b"\xff"}) == snapshot(
        {"1": None, "seat": {"row": 3, "letter": "B"}, "raw": "_w=="}
    )


async def test_describe_approval_reads_the_calls_metadata(opened: Any) -> None:
    reviewed: list[ApprovalReview] = []

    def describe(review: ApprovalReview) -> dict[str, str | int | float]:
        reviewed.append(review)
        return {"Why": str((review.metadata or {}).get("why", "—"))}

    script = Script([Calls([("refund", {"amount": 400})]), "Refunded."])
    runtime = await opened(core_app(script, describe_approval=describe))
    thread = await runtime.db.threads.create(user_id="ada", title="t")
    await send(runtime, thread, "Refund 400")
    [approval] = await runtime.db.approvals.list(thread_id=thread.thread_id)

    context = await runtime.app.context_for(
        ApprovalReview(
            thread_id=thread.thread_id,
            user_id="ada",
            tool_call_id=approval.tool_call_id,
            tool_name=approval.tool_name,
            args=approval.args,
            engine=runtime.db.engine,
            metadata=approval.metadata,
        )
    )

    assert context == {"Why": "over 100"}
    assert reviewed[0].metadata == {"why": "over 100"}


async def test_the_store_refuses_metadata_json_cannot_hold(opened: Any) -> None:
    runtime = await opened(core_app(Script(["Hi."])))
    thread = await runtime.db.threads.create(user_id="ada", title="t")
    run = (await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Hi"))).run
    call = PendingCall("c1", "wire", {}, metadata={"ratio": math.nan})

    with pytest.raises(ValueError, match="JSON compliant"):
        async with runtime.db.engine.begin() as connection:
            await insert_pending(connection, thread.thread_id, run.run_id, [call])

    assert await runtime.db.approvals.list(thread_id=thread.thread_id) == []
