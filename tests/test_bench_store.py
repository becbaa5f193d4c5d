"""`bench.store`: ours is measured in a stated cache state, whatever the number of rounds; ratios pair rounds."""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import pytest

from bench.harness.databases import scratch_database
from bench.store import Results, Section, Settings, checks, render, run_per_size
from bench.store_messages import history, realistic_turn
from bench.store_systems import Contender, Ours, PydanticStoreBackend, Timing
from bench.store_systems import contenders as store_contenders
from store import SqlConversationStore


@pytest.mark.anyio
async def test_ours_is_judged_without_a_history_cache_and_shown_with_every_history_of_a_full_run_cached(
    tmp_path: Path,
) -> None:
    # With the default 64 MB, the cache held every history of a quick run and none of a full one:
    # the two modes measured different work. Both states are now the benchmark's choice.
    contenders = {contender.key: contender for contender in store_contenders(Ours(), "SQLite")}
    cold = await contenders["ours"].open(f"sqlite+aiosqlite:///{tmp_path / 'cold.db'}")
    warm = await contenders["warm"].open(f"sqlite+aiosqlite:///{tmp_path / 'warm.db'}")
    stores: list[SqlConversationStore] = []
    for system in (cold, warm):
        assert isinstance(system, PydanticStoreBackend)
        assert isinstance(system.store, SqlConversationStore)
        stores.append(system.store)
    assert not stores[0].history_cache.enabled
    full = Settings()
    for size in full.sizes:
        warm.prepare(f"history-{size}", history(size))
        await warm.turn(f"size{size}", f"history-{size}")
    one_round = stores[1].history_cache.used
    assert one_round > 64 * 1024 * 1024 // (full.warmup + full.repeats)  # more than the default holds
    assert one_round * (full.warmup + full.repeats) <= stores[1].history_cache.budget
    await cold.aclose()
    await warm.aclose()


def test_turns_are_the_same_messages_every_run_and_every_third_calls_a_tool() -> None:
    assert realistic_turn(7) == realistic_turn(7)
    assert [len(realistic_turn(n)) for n in range(6)] == [2, 2, 4, 2, 2, 4]
    assert len(history(1_000)) == 1_000


def test_targets_are_judged_on_ratios_paired_by_round() -> None:
    results = Results(names={"ours": "ours", "fair": "fair floor", "async": "async floor"})
    # Round 1 ran on a slow core for both: its ratio is 2.0 like round 0's; a ratio of medians would differ.
    ours = {0: Timing(0.001, 0.001), 1: Timing(0.004, 0.004), 2: Timing(0.001, 0.002)}
    fair = {0: Timing(0.0005, 0.0005), 1: Timing(0.002, 0.002), 2: Timing(0.001, 0.001)}
    results.timings = {"ours": {10: ours, 1_000: ours}, "fair": {10: fair}, "async": {10: ours}}
    found = {check.label: (check.ratio, check.verdict) for check in checks(Section("SQLite", results))}
    assert found == {
        "SQLite: load+save at 10 messages, ours / fair floor": (2.0, "FAIL"),
        "SQLite: load+save at 1,000 messages, ours / fair floor": (
            pytest.approx(math.nan, nan_ok=True),
            "n/a",
        ),
        "SQLite: save at 1,000 / save at 10 messages (flat)": (1.0, "PASS"),
        "SQLite: load+save at 10 messages, ours / async floor": (1.0, "PASS"),
    }


@pytest.mark.anyio
async def test_every_system_of_a_database_is_measured_and_a_failing_one_is_left_out_with_its_reason(
    tmp_path: Path,
) -> None:
    async def broken(url: str) -> PydanticStoreBackend:
        raise RuntimeError("no driver here")

    results = Results()
    contenders = [*store_contenders(Ours(), "SQLite"), Contender("broken", broken)]
    scratch = partial(scratch_database, "SQLite", tmp_path)
    await run_per_size(contenders, scratch, Settings(sizes=(10,), warmup=0, repeats=1), results)
    assert results.sizes() == [10]
    assert set(results.timings) == {"ours", "warm", "floor", "fair", "async", "memory"}
    assert results.unavailable == {"broken": "not measured: no driver here"}
    text = "\n".join(render([Section("SQLite", results)], Settings().repeats, ["- environment"]))
    assert "- broken: not measured: no driver here" in text
    assert "| SQLite: load+save at 10 messages, ours / async floor |" in text
