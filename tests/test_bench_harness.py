"""The benchmarks' harness: percentiles, paired ratios, tables and sections, options, SSE parsing."""

from __future__ import annotations

import math
import statistics
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bench.harness.clients import (
    Event,
    LoadResult,
    Measured,
    assistant_message,
    check_turn,
    new_thread,
    sse_events,
)
from bench.harness.options import POSTGRES_ENV, parser, publish, writes
from bench.harness.plain_app import ANSWER_DELTAS, build_agent
from bench.harness.reports import command_line, table, write_section
from bench.harness.stats import median, ms, ms_short, paired_ratio, percentile, ratio, times
from bench.web import Phase, errors


def test_percentiles_interpolate_between_ranks_as_the_inclusive_quantiles_do() -> None:
    values = [7.0, 1.0, 3.0, 10.0, 4.0, 2.5, 8.0]
    assert percentile(values, 0.0) == 1.0
    assert percentile(values, 1.0) == 10.0
    assert percentile(values, 0.5) == 4.0 == statistics.median(values)
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5 == median([4.0, 3.0, 2.0, 1.0])
    assert percentile([10.0, 20.0], 0.9) == pytest.approx(19.0)
    quantiles = statistics.quantiles(values, n=100, method="inclusive")
    assert [percentile(values, n / 100) for n in range(1, 100)] == pytest.approx(quantiles)
    assert math.isnan(percentile([], 0.5))


def test_a_paired_ratio_is_the_median_of_ratios_of_the_same_key() -> None:
    # Round 1 ran on a slow core for both sides: 4 against 2. The ratio of totals would say 2.0x.
    ours = {0: 1.5, 1: 4.0, 2: 3.0, 3: 9.0}
    theirs = {0: 1.0, 1: 2.0, 2: 1.0, 4: 1.0}
    assert paired_ratio(ours, theirs) == 2.0
    # A key only one side has, a zero or a missing figure on either side, is left out.
    assert paired_ratio({0: 1.2, 1: 5.0, 2: math.nan}, {0: 1.0, 1: 0.0, 2: 1.0}) == 1.2
    assert math.isnan(paired_ratio({}, theirs))
    assert ratio(3.0, 2.0) == 1.5
    assert math.isnan(ratio(3.0, 0.0))


def test_figures_are_written_with_their_units_and_a_missing_one_as_a_dash() -> None:
    assert ms(0.0123) == "12.3"
    assert ms(0.0123, 2) == "12.30"
    assert ms_short(0.0456) == "45.6"
    assert ms_short(1.2345) == "1,234"
    assert times(1.234) == "1.23x"
    assert ms(math.nan) == ms_short(math.nan) == times(math.nan) == "—"


def test_tables_align_the_columns_they_are_told_to() -> None:
    assert table("name | ms", [["a", 1.5], ["b", 2]], align="lr") == [
        "| name | ms |",
        "|---|---:|",
        "| a | 1.5 |",
        "| b | 2 |",
    ]
    assert table(["x"], []) == ["| x |", "|---|"]


def test_a_section_replaces_its_own_block_and_leaves_the_rest(tmp_path: Path) -> None:
    docs = tmp_path / "benchmarks.md"
    write_section(docs, "web", "## Web\n\nold")
    write_section(docs, "store", "## Store\n")
    docs.write_text(docs.read_text().replace("## Store", "Prose between.\n\n## Store"))
    write_section(docs, "web", "## Web\n\nnew\n\n")
    assert docs.read_text() == (
        "# Benchmarks\n\nEach section's results are written by its benchmark; see `bench/README.md`.\n\n"
        "<!-- bench:web -->\n## Web\n\nnew\n<!-- /bench:web -->\n\n"
        "<!-- bench:store -->\nProse between.\n\n## Store\n<!-- /bench:store -->\n"
    )


def test_the_command_is_written_without_the_urls_it_was_given() -> None:
    argv = ["--postgres", "postgresql+asyncpg://user:secret@host/db", "--users", "2"]
    assert command_line("bench.web", argv) == "python -m bench.web --postgres URL --users 2"


def test_postgresql_comes_from_the_environment_unless_refused_or_explicit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(POSTGRES_ENV, "postgresql+asyncpg://env/db")
    optional = parser("bench.x", "What it does.\n\nMore.")
    assert optional.description == "What it does."
    assert optional.parse_args([]).postgres == "postgresql+asyncpg://env/db"
    assert optional.parse_args(["--no-postgres"]).postgres is None
    assert (
        optional.parse_args(["--postgres", "postgresql+asyncpg://other/db"]).postgres
        == "postgresql+asyncpg://other/db"
    )
    explicit = parser("bench.x", None, postgres="explicit", quick=None)
    assert explicit.parse_args([]).postgres is None
    with pytest.raises(SystemExit):
        explicit.parse_args(["--quick"])


def test_a_full_run_writes_its_sections_unless_told_otherwise() -> None:
    options = parser("bench.x", None, strict=True)
    assert writes(options.parse_args([]), full=True)
    assert not writes(options.parse_args(["--quick"]), full=False)
    assert writes(options.parse_args(["--quick", "--write"]), full=False)
    assert not writes(options.parse_args(["--no-write"]), full=True)
    assert options.parse_args(["--strict"]).strict
    assert options.parse_args([]).output.name == "benchmarks.md"


async def _lines(*lines: str) -> AsyncIterator[str]:
    for line in lines:
        yield line


@pytest.mark.anyio
async def test_an_sse_stream_becomes_events_with_their_ids_and_types() -> None:
    lines = _lines(
        ": ping",
        "",
        "id: 7",
        "event: text_delta",
        'data: {"delta":',
        'data: "hi"}',
        "",
        'data: {"type": "finish"}',
        "",
        "data: [DONE]",
        "",
        'data: {"unterminated": true}',
    )
    found = [(e.event_id, e.type, e.data) async for e in sse_events(lines)]
    assert found == [(7, "text_delta", {"delta": "hi"}), (None, "message", {"type": "finish"})]


def _turn(run_id: str, first_id: int, *, text: str = "Order shipped.") -> list[Event]:
    shape: list[tuple[str, dict[str, str]]] = [
        ("run_started", {}),
        ("user_message", {}),
        ("tool_call", {}),
        ("tool_result", {}),
        ("text_delta", {"delta": "Order "}),
        ("text_delta", {"delta": "shipped."}),
        ("text_done", {"text": text}),
        ("run_finished", {"status": "completed"}),
    ]
    return [
        Event(0.0, first_id + n, kind, {"run_id": run_id, **data}) for n, (kind, data) in enumerate(shape)
    ]


def test_a_turn_counts_only_when_all_its_events_are_there_in_order() -> None:
    assert check_turn(_turn("r1", 10), "r1", 9) is None
    assert check_turn(_turn("r1", 10), "r1", 10) == "ids [10, 11, 12, 13, 14, 15, 16, 17] after 10"
    assert check_turn(_turn("r1", 10), "r2", 0) == "an event of another run than r2"
    assert check_turn(_turn("r1", 10, text="Order"), "r1", 0) == "text_done differs from its deltas"
    missing = [event for event in _turn("r1", 10) if event.type != "tool_result"]
    assert (check_turn(missing, "r1", 0) or "").startswith(
        "event types ['run_started', 'user_message', 'tool_call', 'text_delta'"
    )


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


def test_a_full_run_prints_and_writes_every_section_and_a_partial_one_only_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "benchmarks.md"
    options = parser("bench.x", "A benchmark.")
    sections = {"x-sqlite": "## On SQLite\n\n1.0 ms", "x-postgresql": "## On PostgreSQL\n\n2.0 ms"}
    publish(options.parse_args(["--quick", "--output", str(output)]), sections, full=False)
    assert not output.exists()
    assert "## On SQLite\n\n1.0 ms\n## On PostgreSQL\n\n2.0 ms" in capsys.readouterr().out
    publish(options.parse_args(["--output", str(output)]), sections, full=True)
    written = output.read_text()
    assert "<!-- bench:x-sqlite -->\n## On SQLite\n\n1.0 ms\n<!-- /bench:x-sqlite -->" in written
    assert "<!-- bench:x-postgresql -->\n## On PostgreSQL\n\n2.0 ms\n<!-- /bench:x-postgresql -->" in written


def test_what_went_wrong_in_a_phase_is_listed_by_kind_status_and_log_line() -> None:
    result = LoadResult(users=20, turns_per_user=1)
    result.error("stalled stream", "no event for 120s during a turn")
    result.error("stalled stream", "again")
    measured = Measured(result, server_cpu=1.0, client_cpu=0.5)
    log = ["WARNING: slow", "WARNING: slow", *(f"ERROR {n}" for n in range(10))]
    phase = Phase("PostgreSQL", measured, statuses={"503": 3, "409": 1}, trouble=log)
    assert phase.label == "PostgreSQL, 20 users"
    clean = Phase("SQLite", Measured(LoadResult(users=20, turns_per_user=1), 0.0, 0.0))
    lines = errors([phase, clean], ["SQLite, 50 users: did not start"], "Errors:")
    assert lines[:4] == [
        "",
        "Errors:",
        "",
        "- PostgreSQL, 20 users: stalled stream x2 (e.g. 'no event for 120s during a turn'); 409 x1; 503 x3",
    ]
    # Each log line once, eight at most; a phase with nothing wrong is not listed.
    assert lines[4:12] == [
        "  - server log: `WARNING: slow`",
        *(f"  - server log: `ERROR {n}`" for n in range(7)),
    ]
    assert lines[12:] == ["- could not run: `SQLite, 50 users: did not start`"]
    assert errors([clean], [], "Errors:") == []


def test_one_turn_in_five_starts_a_thread_however_few_turns_the_users_get() -> None:
    per_thread = 5
    for turns in (1, 2, 7):
        starts = sum(new_thread(user, turn, per_thread) for user in range(200) for turn in range(turns))
        assert starts == 200 * turns // per_thread
    # Each user's threads hold five turns, but the first, cut to stagger the users.
    assert [new_thread(3, turn, per_thread) for turn in range(8)] == [
        False, False, True, False, False, False, False, True,
    ]  # fmt: skip


@pytest.mark.anyio
async def test_the_plain_app_looks_the_order_up_then_answers_in_twelve_deltas_of_about_sixty_words() -> None:
    result = await build_agent().run("Where is ORD-9012?")
    calls = [
        part for message in result.all_messages() for part in message.parts if part.part_kind == "tool-call"
    ]
    assert [(call.tool_name, call.args_as_dict()) for call in calls] == [
        ("lookup_order", {"order_id": "ORD-9012"})
    ]
    assert result.output.startswith("Your order ORD-9012 (Gadget Plus) is processing.")
    assert 55 <= len(result.output.split()) <= 75
    assert ANSWER_DELTAS == 12
