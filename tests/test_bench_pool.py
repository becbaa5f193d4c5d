"""`bench.pool`'s report: new sessions per pool setting, per 100 turns."""

from __future__ import annotations

from bench.pool import Measured, parse, render


def test_the_report_gives_each_pool_setting_its_sessions_per_100_turns() -> None:
    arguments = parse(
        ["--postgres", "postgresql+asyncpg://postgres@127.0.0.1/test", "--users", "20", "--turns", "10"]
    )
    results = [Measured("10+20", 200, 12.5, 116, 0, 17.25), Measured("20+10", 200, 11.0, 0, 0, 14.0)]
    text = render(results, arguments, "PostgreSQL 15.20", 60.0)
    rows = [line for line in text.splitlines() if line.startswith("| 1") or line.startswith("| 2")]
    assert rows == [
        "| 10+20 | 200 | 12.5 | 116 | 58.0 | 17.2 | 0 |",
        "| 20+10 | 200 | 11.0 | 0 | 0.0 | 14.0 | 0 |",
    ]
    assert "20 users take 10 demo turns each" in text
    assert "; PostgreSQL 15.20" in text
