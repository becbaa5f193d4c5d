"""`bench.cpu`'s arithmetic: paired ratios, verdicts, and the AI SDK client's rebuilt assistant message."""

from __future__ import annotations

from bench.cpu_clients import assistant_message
from bench.cpu_report import AI_SDK, BASELINE, NATIVE, Report, Round, paired_ratio, render_cpu


def _round(side: str, number: int, cpu: float, turns: int, users: int = 20) -> Round:
    return Round("SQLite", users, side, number, cpu, 0.1, 1.0, turns)


def test_paired_ratio_is_the_median_of_ratios_of_rounds_of_the_same_number() -> None:
    baseline = [_round(BASELINE, 0, 1.0, 100), _round(BASELINE, 1, 2.0, 100), _round(BASELINE, 2, 1.0, 100)]
    ours = [_round(NATIVE, 0, 1.5, 100), _round(NATIVE, 1, 2.0, 50), _round(NATIVE, 2, 3.0, 100)]
    # Per round: 1.5x, 2.0x (a slow core for both: 40 ms against 20 ms), 3.0x; a ratio of totals would say 2.6x.
    assert paired_ratio(ours, baseline) == 2.0


def test_paired_ratio_skips_rounds_without_turns_or_without_a_partner() -> None:
    baseline = [_round(BASELINE, 0, 1.0, 0), _round(BASELINE, 1, 1.0, 100)]
    ours = [_round(NATIVE, 0, 1.0, 10), _round(NATIVE, 1, 1.2, 100), _round(NATIVE, 2, 9.0, 100)]
    assert paired_ratio(ours, baseline) == 1.2
    assert paired_ratio([], baseline) is None


def test_the_targets_table_judges_each_protocol_against_its_own_limit() -> None:
    report = Report(command="python -m bench.cpu")
    report.rounds = [_round(BASELINE, 0, 1.0, 100), _round(NATIVE, 0, 1.4, 100), _round(AI_SDK, 0, 1.4, 100)]
    lines = render_cpu(report)
    native = next(line for line in lines if "CPU per turn, ours, native API / baseline" in line)
    ai_sdk = next(line for line in lines if "CPU per turn, ours, AI SDK endpoint / baseline" in line)
    assert native.split(" | ")[3:] == ["1.40x", "at most 1.5x", "**PASS** |"]
    assert ai_sdk.split(" | ")[3:] == ["1.40x", "at most 1.3x", "**FAIL** |"]


def test_the_assistant_message_holds_the_steps_the_tool_call_with_its_result_and_the_text() -> None:
    chunks = [
        {"type": "start", "messageId": "m1"},
        {"type": "start-step"},
        {"type": "tool-input-start", "toolCallId": "c1", "toolName": "lookup_order"},
        {
            "type": "tool-input-available",
            "toolCallId": "c1",
            "toolName": "lookup_order",
            "input": {"order_id": "X"},
        },
        {"type": "tool-output-available", "toolCallId": "c1", "output": {"status": "shipped"}},
        {"type": "finish-step"},
        {"type": "start-step"},
        {"type": "text-start", "id": "t1"},
        {"type": "text-delta", "id": "t1", "delta": "Order "},
        {"type": "text-delta", "id": "t1", "delta": "X shipped."},
        {"type": "text-end", "id": "t1"},
        {"type": "finish-step"},
        {"type": "finish"},
    ]
    assert assistant_message(chunks) == {
        "id": "m1",
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {
                "type": "tool-lookup_order",
                "toolCallId": "c1",
                "state": "output-available",
                "input": {"order_id": "X"},
                "output": {"status": "shipped"},
            },
            {"type": "step-start"},
            {"type": "text", "text": "Order X shipped.", "state": "done"},
        ],
    }
