"""`bench.soak`: the server's censuses (`bench.soak_serve`), their table, and the verdict on its samples."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
from pydantic_ai.conversation import Conversation

from bench.soak_report import Sample, census_lines, judge, type_growth
from bench.soak_serve import caches, count_types, malloc_info, pymalloc_info, register_stores, take
from store import SqlConversationStore

from .store_conformance import user


class Retained:
    """What the test keeps alive between two censuses, to be found in the table."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload


def test_type_growth_puts_the_largest_growth_first_and_leaves_out_what_did_not_change() -> None:
    before = {"builtins.dict": (10, 1000), "a.Record": (5, 300), "b.Same": (2, 20)}
    after = {"builtins.dict": (12, 1200), "a.Record": (50, 3000), "b.Same": (2, 20), "c.New": (1, 8)}

    assert type_growth(before, after) == [("a.Record", 45, 2700), ("builtins.dict", 2, 200), ("c.New", 1, 8)]


def test_the_census_counts_live_objects_and_both_allocators_account_for_bytes() -> None:
    kept = [Retained(b"x") for _ in range(100)]
    counted, size = count_types()[f"{__name__}.Retained"]
    assert counted >= len(kept)
    assert size > 0
    assert pymalloc_info()["in_use"] > 0
    assert set(malloc_info()) <= {"heap", "in_use", "free", "mmapped"}


@pytest.mark.anyio
async def test_the_stores_built_after_registering_report_their_caches(tmp_path: Path) -> None:
    undo = register_stores()
    try:
        store = await SqlConversationStore.connect(f"sqlite+aiosqlite:///{tmp_path / 'chat.db'}")
    finally:
        undo()
    async with store:
        for n in range(3):
            await store.save(Conversation(conversation_id=f"chat-{n}", messages=[user("hello")]))

        assert caches()["records"] == 3
        assert caches()["histories"] == 3
        assert caches()["history_charge"] == store.history_cache.used > 0


def test_a_soaks_censuses_become_a_table_and_the_types_that_grew(tmp_path: Path) -> None:
    gc.freeze()  # as the server does once started
    try:
        take(tmp_path, 1)
        take(tmp_path, 2)
        kept = [Retained(b"x") for _ in range(3000)]
        take(tmp_path, 3)
    finally:
        gc.unfreeze()
    assert json.loads((tmp_path / "taken-3.json").read_text())["rss_kb"] > 0

    lines = census_lines(tmp_path, ["0.0", "2.0", "10.1"])

    rows = [line for line in lines if line.startswith("|")]
    assert rows[0].startswith("| minute | RSS | gc objects |")
    assert [row.split(" | ")[0] for row in rows[2:]] == ["| 0.0", "| 2.0", "| 10.1"]
    assert f"{__name__}.Retained +{len(kept)} " in lines[-1]


def _samples(rss_mb: list[float], fds: int = 40) -> list[Sample]:
    return [Sample(60.0 * n, 100 * n, int(mb * 1024), fds, 10, 7) for n, mb in enumerate(rss_mb)]


def test_memory_is_flat_when_it_grows_less_than_five_percent_after_the_warm_up() -> None:
    flat, text = judge(_samples([100, 140, 150, 150.5, 151, 151, 151.5, 152, 152, 152.5, 152.5]))
    assert flat
    assert text.startswith(
        "after the warm-up (the first 2 min), resident memory went from 151.0 to 152.5 MB (+1.0%"
    )
    growing, _ = judge(_samples([100, 140, 150, 155, 160, 165, 170, 175, 180, 185, 190]))
    assert not growing
    assert judge(_samples([100, 150, 150]))[1] == "too few samples to judge"
    # The warm-up judged apart set by hand: the cache's filling (to minute 6 here) is left out.
    filling = _samples([100, 120, 140, 160, 180, 190, 191, 191, 191.5, 191.5, 191.5])
    assert not judge(filling)[0]
    assert judge(filling, warm_up_seconds=300)[0]
