"""`bench.storage`: a plain app's threads measured by table, against their conversation's own JSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.storage import TURNS, measure, report

pytestmark = pytest.mark.anyio


async def test_storage_per_thread_is_measured_by_table_and_against_the_json(tmp_path: Path) -> None:
    grown, compacted, found, threads = await measure(
        f"sqlite+aiosqlite:///{tmp_path / 'storage.db'}", tmp_path, 2
    )

    assert threads == 2
    assert {"conversation_entries", "events"} <= set(grown)  # the others fit in their first page
    assert compacted["events"] < grown["events"] / 2  # the text deltas were most of the log
    assert compacted["conversation_entries"] == grown["conversation_entries"]
    # Every turn's two requests repeat the same instructions: most of the JSON.
    assert 0.5 < found.instructions / found.json < 0.9
    assert (
        found.events == threads * TURNS * 18
    )  # a turn's events: opening, tool call and result, 12 deltas, end
    lines = report("SQLite", grown, compacted, found, threads)
    assert lines[0].startswith("### SQLite: bytes per thread of 5 turns; the conversation's own JSON is ")
    assert lines[-3].startswith("| **all tables** | ")
