"""`bench.storage`: a plain app's threads measured by table, against their conversation's own JSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.storage import TURNS, measure, report

pytestmark = pytest.mark.anyio


async def test_storage_per_thread_is_measured_by_table_and_against_the_json(tmp_path: Path) -> None:
    grown, found, threads = await measure(f"sqlite+aiosqlite:///{tmp_path / 'storage.db'}", tmp_path, 2)

    assert threads == 2
    assert {"conversation_entries", "events"} <= set(grown)  # the others fit in their first page
    # Every turn's two requests repeat the same instructions: most of the JSON.
    assert 0.5 < found.instructions / found.json < 0.9
    assert (
        found.events == threads * TURNS * 18
    )  # a turn's events: opening, tool call and result, 12 deltas, end
    lines = report("SQLite", grown, found, threads)
    assert lines[0].startswith("### SQLite: bytes per thread of 5 turns; the conversation's own JSON is ")
    assert lines[-3].startswith("| **all tables** | ")
