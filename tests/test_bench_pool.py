"""`bench.pool`'s report: new sessions per pool setting, per 100 turns."""

from __future__ import annotations

from bench.pool import Measured, render


def test_the_report_gives_each_pool_setting_its_sessions_per_100_turns() -> None:
    results = [Measured("10+20", 200, 12.5, 116, 0, 17.25), Measured("20+10", 200, 11.0, 0, 0, 14.0)]
    text = render(results, 20, 10, ["- Python 3.11; SQLite 3.40; PostgreSQL 15.20"])
    rows = [line for line in text.splitlines() if line.startswith(("| 1", "| 2"))]
    assert rows == [
        "| 10+20 | 200 | 12.5 | 116 | 58.0 | 17.2 | 0 |",
        "| 20+10 | 200 | 11.0 | 0 | 0.0 | 14.0 | 0 |",
    ]
    assert "20 users take 10 demo turns each" in text
    assert "- Python 3.11; SQLite 3.40; PostgreSQL 15.20" in text
