"""`bench.cpu`'s arithmetic: paired ratios of rounds, and verdicts against each protocol's limit."""

from __future__ import annotations

import math

from bench.cpu_report import AI_SDK, BASELINE, NATIVE, Report, Round, paired_ratio, render_cpu
from bench.harness.clients import LoadResult, Measured


def _round(side: str, number: int, cpu: float, turns: int, users: int = 20) -> Round:
    load = LoadResult(users, 1, elapsed=1.0, completed_turns=turns)
    return Round("SQLite", users, side, number, Measured(load, server_cpu=cpu, client_cpu=0.1))


def test_paired_ratio_is_the_median_of_ratios_of_rounds_of_the_same_number() -> None:
    baseline = [_round(BASELINE, 0, 1.0, 100), _round(BASELINE, 1, 2.0, 100), _round(BASELINE, 2, 1.0, 100)]
    ours = [_round(NATIVE, 0, 1.5, 100), _round(NATIVE, 1, 2.0, 50), _round(NATIVE, 2, 3.0, 100)]
    # Per round: 1.5x, 2.0x (a slow core for both: 40 ms against 20 ms), 3.0x; a ratio of totals would say 2.6x.
    assert paired_ratio(ours, baseline) == 2.0


def test_paired_ratio_skips_rounds_without_turns_or_without_a_partner() -> None:
    baseline = [_round(BASELINE, 0, 1.0, 0), _round(BASELINE, 1, 1.0, 100)]
    ours = [_round(NATIVE, 0, 1.0, 10), _round(NATIVE, 1, 1.2, 100), _round(NATIVE, 2, 9.0, 100)]
    assert paired_ratio(ours, baseline) == 1.2
    assert math.isnan(paired_ratio([], baseline))


def test_the_targets_table_judges_each_protocol_against_its_own_limit() -> None:
    report = Report()
    report.rounds = [_round(BASELINE, 0, 1.0, 100), _round(NATIVE, 0, 1.4, 100), _round(AI_SDK, 0, 1.4, 100)]
    lines = render_cpu(report, [])
    native = next(line for line in lines if "CPU per turn, ours, native API / baseline" in line)
    ai_sdk = next(line for line in lines if "CPU per turn, ours, AI SDK endpoint / baseline" in line)
    assert native.split(" | ")[3:] == ["1.40x", "at most 1.5x", "**PASS** |"]
    assert ai_sdk.split(" | ")[3:] == ["1.40x", "at most 1.3x", "**FAIL** |"]
