"""`bench.step`'s report: the target's verdict, and pydantic-ai-harness's column when it was measured."""

from __future__ import annotations

from bench.step import LIMIT, Case, Report, render


def _row(lines: list[str], label: str) -> list[str]:
    return next(line for line in lines if f"| {label} |" in line).strip("| ").split(" | ")


def test_ours_is_judged_against_the_bare_turn_and_compared_with_the_harness() -> None:
    report = Report(warmup=1, repeats=3)
    report.cases["SQLite"] = [
        Case("1st turn of a new thread", ours=0.012, bare=0.010, rounds=3, harness=0.030),
        Case("10th turn of a thread", ours=0.030, bare=0.020, rounds=3, harness=0.025),
    ]
    lines = render(report, ["- Date: now"])
    assert LIMIT == 1.25
    assert _row(lines, "1st turn of a new thread")[2:] == [
        "12.00",
        "10.00",
        "30.00",
        "1.20x",
        "3.00x",
        "at most 1.25x",
        "PASS",
        "yes",
    ]
    assert _row(lines, "10th turn of a thread")[4:] == [
        "25.00",
        "1.50x",
        "1.25x",
        "at most 1.25x",
        "FAIL",
        "no",
    ]
    assert "**Verdict: PASS**: 1.20x on SQLite, at most 1.25x wanted." in lines
    assert "ours is ahead of it (12.00 ms against 30.00 ms)" in "\n".join(lines)
    assert "- Date: now" in lines


def test_without_the_harness_its_column_is_empty_and_the_report_says_how_to_install_it() -> None:
    report = Report(warmup=1, repeats=3)
    report.cases["SQLite"] = [Case("1st turn of a new thread", ours=0.013, bare=0.010, rounds=3)]
    lines = render(report, [])
    assert _row(lines, "1st turn of a new thread")[4:] == ["—", "1.30x", "—", "at most 1.25x", "FAIL", "—"]
    assert "`pip install --no-deps pydantic-ai-harness`" in "\n".join(lines)
    assert (
        "**Verdict: FAIL**: 1.30x on SQLite, 1.04 times the 1.25x target; ours takes 0.5 ms too long."
        in lines
    )
