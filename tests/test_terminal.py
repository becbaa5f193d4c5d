"""The terminal sink's rendering on a terminal (rich): colours, markdown, results wrapped at words."""

from __future__ import annotations

import io
import json
import re

import pytest
from inline_snapshot import snapshot

from cli.terminal import TerminalSink, conversation_lines, fields_line, refusal, short, type_label
from stream import RunFinished, RunStarted, StreamEvent, TextDelta, TextDone, ToolCall, ToolResult

pytestmark = pytest.mark.anyio

_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _visible(raw: str) -> list[str]:
    text = _ESCAPES.sub("", raw).replace("\r", "\n")
    return [line.rstrip() for line in text.split("\n")]


async def _render(*events: StreamEvent, width: int = 60) -> str:
    out = io.StringIO()
    sink = TerminalSink(out, terminal=True, width=width)
    for event in events:
        await sink.emit(event)
    sink.stop_spinner()
    return out.getvalue()


async def test_a_reply_streams_then_shows_as_rendered_markdown() -> None:
    text = "**Refunded** $5.00 for `ORD-9012`.\n\n- one\n- two"
    raw = await _render(
        RunStarted(run_id="r", kind="message"),
        *(TextDelta(run_id="r", part_id="p", delta=word) for word in re.split(r"(?<= )", text)),
        TextDone(run_id="r", part_id="p", text=text),
        RunFinished(run_id="r", status="completed"),
    )
    assert "Thinking…" in raw  # the spinner, until the first word
    assert "\x1b[1mRefunded\x1b[0m" in raw  # bold, from the markdown
    lines = _visible(raw)
    # Streamed as written, then erased and shown rendered: no asterisks or backticks left.
    assert lines[-5:] == [
        "assistant> Refunded $5.00 for ORD-9012.",
        "",
        "            • one",
        "            • two",
        "",
    ]


async def test_tool_results_wrap_at_word_boundaries_and_refusals_are_not_green() -> None:
    answer = "Standard shipping takes 3-5 business days and is free on orders over $50. " * 3
    raw = await _render(
        ToolCall(run_id="r", tool_call_id="c", tool_name="search_faq", args={"query": "shipping"}),
        ToolResult(
            run_id="r",
            tool_call_id="c",
            tool_name="search_faq",
            outcome="success",
            content={"answer": answer},
        ),
        ToolResult(
            run_id="r",
            tool_call_id="d",
            tool_name="issue_refund",
            outcome="success",
            content={
                "order_id": "ORD-1",
                "refunded": 0.0,
                "accepted": False,
                "message": "ORD-1 was already refunded in full.",
            },
        ),
    )
    lines = _visible(raw)
    first = next(index for index, line in enumerate(lines) if line.startswith("← search_faq"))
    result = [lines[first]]
    for line in lines[first + 1 :]:
        if not line or line.startswith(("←", "⠋")):
            break
        result.append(line)
    assert len(result) > 2
    assert all(len(line) <= 60 for line in result)
    # No word was cut in two: the lines' words are exactly the result's.
    expected = "← search_faq: " + json.dumps({"answer": answer})
    assert " ".join(result).split() == expected.split()
    assert "\x1b[32m← " in raw  # a success is green
    refused = next(line for line in _visible(raw) if line.startswith("← issue_refund"))
    assert refused.startswith("← issue_refund refused: ")
    assert "\x1b[33m← \x1b[0m\x1b[1;33missue_refund refused" in raw  # yellow, not green


def test_refusals_and_plain_results() -> None:
    assert refusal({"accepted": False, "message": "no"}) == "no"
    assert refusal({"cancelled": False}) == "refused"
    assert refusal({"error": "No order 'X' was found."}) == "No order 'X' was found."
    assert refusal({"accepted": True}) is None
    assert refusal("text") is None
    # Cut at a word near the end, not in the middle of one.
    assert short("alpha beta gamma delta", 15) == "alpha beta…"
    assert short("x" * 30, 10) == "x" * 9 + "…"
    assert conversation_lines([]) == []


async def test_a_structured_output_is_a_table_of_its_fields() -> None:
    output = {"flight_number": "TP-101", "destination": "Lisbon", "price": 420.0, "stops": ["OPO", "MAD"]}
    raw = await _render(
        ToolCall(run_id="r", tool_call_id="c", tool_name="final_result_FlightFound", args=output),
        ToolResult(
            run_id="r",
            tool_call_id="c",
            tool_name="final_result_FlightFound",
            outcome="success",
            content="Final result processed.",
        ),
        RunFinished(run_id="r", status="completed", output=output, output_type="FlightFound"),
    )
    assert [line for line in _visible(raw) if line][-5:] == snapshot(
        [
            "assistant> Flight found",
            "           flight_number  TP-101",
            "           destination    Lisbon",
            "           price          420.0",
            "           stops          OPO, MAD",
        ]
    )
    empty = await _render(RunFinished(run_id="r", status="completed", output={}, output_type="NoFlightFound"))
    assert [line for line in _visible(empty) if line] == snapshot(["assistant> No flight found (no details)"])


async def test_a_structured_output_off_a_terminal_is_a_line_per_field() -> None:
    out = io.StringIO()
    sink = TerminalSink(out, terminal=False)
    await sink.emit(
        RunFinished(
            run_id="r", status="completed", output={"reference": "BK-1", "seat": None}, output_type="Booked"
        )
    )
    await sink.emit(RunFinished(run_id="r", status="completed", output=[1, 2], output_type="list"))
    await sink.emit(
        RunFinished(run_id="r", status="completed", output="plain text")
    )  # the reply was its text
    await sink.emit(RunFinished(run_id="r", status="completed", output={}, output_type="NoFlightFound"))
    assert out.getvalue().splitlines() == snapshot(
        [
            "assistant> Booked",
            "  reference: BK-1",
            "  seat: —",
            "assistant> List",
            "  1: 1",
            "  2: 2",
            "assistant> No flight found (no details)",
        ]
    )


def test_type_labels_and_field_texts() -> None:
    assert [type_label(name) for name in ("NoFlightFound", "HTTPError", "final_result", "int")] == snapshot(
        ["No flight found", "HTTP error", "Final result", "Int"]
    )
    assert fields_line(
        {"fare": "non-refundable", "bags": 1, "ok": True, "rules": ["a", "b"], "n": {"x": 1}}
    ) == snapshot('fare: non-refundable · bags: 1 · ok: true · rules: a, b · n: {"x": 1}')
