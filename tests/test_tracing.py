"""Tracing of runs over a real database, on the core tests' own app: the span tree, trace ids
everywhere, content and redaction.

The session's tracer provider (see `conftest.py`) exports every span, redacted as in production, to
the in-memory exporter the `spans` fixture returns.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import replace

import pytest
import sqlalchemy as sa
from dirty_equals import IsStr
from inline_snapshot import snapshot
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent import decide, run_step
from store import record_store_spans
from store.schema import ApprovalRow, RunRow, metadata

from .conftest import TRACE_SECRET
from .core_app import CoreFactory
from .scripted import Calls, Script
from .step_app import App

HEX32 = IsStr(regex=r"[0-9a-f]{32}")
LOOKUP = Calls([("lookup", {"key": "plan"})])
# Timing decides whether the event log's background writer stores some events between checkpoints.
_TIMING_DEPENDENT = {"store.append_events"}


@pytest.fixture(autouse=True)
def store_spans() -> Iterator[None]:
    """These tests show the store's operation spans, which a deployment turns on with `DURABLE_CHAT_TRACE_STORE=1`."""
    record_store_spans(True)
    yield
    record_store_spans(False)


def trace_id_of(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.trace_id, "032x")


def tree(spans: Iterable[ReadableSpan]) -> list[str]:
    """Span names indented under their parents, children in start order; a missing parent makes a root."""
    spans = [span for span in spans if span.name not in _TIMING_DEPENDENT]
    ids = {span.context.span_id for span in spans if span.context is not None}
    children: dict[int | None, list[ReadableSpan]] = defaultdict(list)
    for span in spans:
        parent = span.parent.span_id if span.parent is not None and span.parent.span_id in ids else None
        children[parent].append(span)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in sorted(children[parent], key=lambda s: s.start_time or 0):
            lines.append("  " * depth + span.name)
            assert span.context is not None
            walk(span.context.span_id, depth + 1)

    walk(None, 0)
    return lines


def every_text(spans: Iterable[ReadableSpan]) -> str:
    """All names, attribute values and event attributes of the spans, as one string to search."""
    parts: list[object] = []
    for span in spans:
        parts += [span.name, *(span.attributes or {}).values(), span.status.description]
        for event in span.events:
            parts += [event.name, *(event.attributes or {}).values()]
    return json.dumps(parts, default=str)


async def stored_trace_ids(app: App, table: str, key: str) -> dict[str, str | None]:
    rows = metadata.tables[table]
    async with app.db.engine.connect() as connection:
        result = await connection.execute(sa.select(rows.c[key], rows.c.trace_id))
        return {row[0]: row[1] for row in result}


@pytest.mark.anyio
async def test_a_paused_and_resumed_run_is_traced_end_to_end(
    core_factory: CoreFactory, spans: InMemorySpanExporter
) -> None:
    app = await core_factory(Script([LOOKUP, Calls([("transfer", {"to": "bob", "amount": 25.5})]), "Sent."]))
    thread = await app.thread()
    paused_id = await app.send(thread, "Please send bob 25.50")
    [tool_call_id] = await app.pending(thread)
    decision = await decide(app.db, thread.thread_id, tool_call_id, decision="approved", decided_by="alice")
    assert decision.resume_run_id is not None
    await run_step(app.runtime, decision.resume_run_id)

    finished = spans.get_finished_spans()
    runs = {
        (span.attributes or {}).get("durable_chat.run_id"): span for span in finished if span.name == "run"
    }
    paused, resumed = runs[paused_id], runs[decision.resume_run_id]
    paused_trace, resumed_trace = trace_id_of(paused), trace_id_of(resumed)
    assert paused_trace != resumed_trace
    assert dict(paused.attributes or {}) == {
        "durable_chat.run_id": paused_id,
        "durable_chat.thread_id": thread.thread_id,
        "durable_chat.run.kind": "message",
        "durable_chat.run.attempt": 1,
        "durable_chat.run.started": True,
        "durable_chat.run.status": "awaiting_approval",
    }
    assert [event.name for event in paused.events] == ["approval_required"]
    assert (resumed.attributes or {}).get("durable_chat.run.status") == "completed"

    # The paused run's trace: the run, the agent's model requests and tool call, the store's operations;
    # then the decision, under the same trace, and the resume in a trace of its own.
    in_paused = [span for span in finished if trace_id_of(span) == paused_trace]
    assert tree(in_paused) == snapshot(
        [
            "run",
            "  store.claim_run",
            "  store.load",
            "  invoke_agent core",
            "    chat scripted",
            "    execute_tool lookup",
            "    chat scripted",
            "      store.checkpoint",
            "  store.checkpoint",
            "approval",
            "  store.decide",
        ]
    )
    approval = next(span for span in in_paused if span.name == "approval")
    assert dict(approval.attributes or {}) == {
        "durable_chat.thread_id": thread.thread_id,
        "durable_chat.run_id": paused_id,
        "durable_chat.tool_call_id": tool_call_id,
        "durable_chat.tool_name": "transfer",
        "durable_chat.approval.decision": "approved",
        "durable_chat.approval.edited": False,
        "durable_chat.approval.repeated": False,
        "durable_chat.approval.resume_run_id": decision.resume_run_id,
    }
    in_resumed = [span for span in finished if trace_id_of(span) == resumed_trace]
    assert "    execute_tool transfer" in tree(in_resumed)

    # The trace id is on the run rows, the approval row and every event of each run.
    assert paused_trace == HEX32
    run_rows = await stored_trace_ids(app, RunRow.__tablename__, "run_id")
    assert (run_rows[paused_id], run_rows[decision.resume_run_id]) == (paused_trace, resumed_trace)
    assert await stored_trace_ids(app, ApprovalRow.__tablename__, "tool_call_id") == {
        tool_call_id: paused_trace
    }
    expected = {paused_id: paused_trace, decision.resume_run_id: resumed_trace}
    events = await app.log(thread)
    assert {event.type for event in events} >= {
        "run_started",
        "tool_call",
        "approval_decided",
        "run_finished",
    }
    assert [(event.type, event.trace_id) for event in events] == [
        (event.type, expected[event.run_id]) for event in events
    ]


@pytest.mark.anyio
async def test_prompts_and_completions_stay_out_of_spans_by_default(
    core_factory: CoreFactory, spans: InMemorySpanExporter
) -> None:
    app = await core_factory(Script([LOOKUP, "You are on Platinum."]), tenant="Globex")
    thread = await app.thread()
    await app.send(thread, "Which plan am I on? My neighbour Quentin asked")

    text = every_text(spans.get_finished_spans())
    assert "chat scripted" in text  # the model request was traced...
    assert "Quentin" not in text  # ...without the prompt
    assert "Globex" not in text  # nor the tool's result
    assert "Platinum" not in text  # nor the completion


@pytest.mark.anyio
async def test_content_is_traced_when_enabled_and_redacted(
    core_factory: CoreFactory, spans: InMemorySpanExporter
) -> None:
    app = await core_factory(Script([LOOKUP, "You are on Platinum."]), tenant="Globex")
    traced = App(replace(app.runtime, trace_content=True))
    thread = await traced.thread()
    await traced.send(
        thread,
        f"What plan is alice@example.com on? Card 4111 1111 1111 1111, key {TRACE_SECRET}, Quentin asks",
    )

    text = every_text(spans.get_finished_spans())
    assert "Quentin asks" in text  # the prompt is in the spans...
    assert "plan for Globex" in text  # ...and the tool's result
    assert "You are on Platinum." in text  # ...and the completion
    assert all(mask in text for mask in ("[email]", "[card]", "[secret]"))
    assert "alice@example.com" not in text
    # The card's digits in any spacing; "4111" alone turns up by chance in a span's durations,
    # timestamps and ids (about one run in a hundred).
    assert re.search(r"4111[\s-]*1111", text) is None
    assert TRACE_SECRET not in text
    # Redaction is for operators only: the user's conversation keeps every word.
    [stored] = [event for event in await traced.log(thread) if event.type == "user_message"]
    assert stored.type == "user_message"
    assert f"alice@example.com on? Card 4111 1111 1111 1111, key {TRACE_SECRET}" in stored.content


@pytest.mark.anyio
async def test_a_failed_run_is_an_error_span_with_its_exception_redacted(
    core_factory: CoreFactory, spans: InMemorySpanExporter
) -> None:
    app = await core_factory(Script([]))

    async def broken(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        raise RuntimeError("the provider rejected bob@example.com")
        yield ""  # an async generator, as pydantic-ai streams the model

    model = FunctionModel(stream_function=broken)
    failing = App(replace(app.runtime, model=model))
    thread = await failing.thread()
    run_id = await failing.send(thread, "Hello")

    [run] = [span for span in spans.get_finished_spans() if span.name == "run"]
    assert (run.attributes or {}).get("durable_chat.run_id") == run_id
    assert (run.attributes or {}).get("durable_chat.run.status") == "failed"
    assert (run.status.status_code, run.status.description) == (StatusCode.ERROR, "RuntimeError")
    [exception] = [event for event in run.events if event.name == "exception"]
    assert (exception.attributes or {}).get("exception.message") == "the provider rejected [email]"
    finished = (await failing.log(thread))[-1]
    assert finished.type == "run_finished"
    assert finished.trace_id == trace_id_of(run)
