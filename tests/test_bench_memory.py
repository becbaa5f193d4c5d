"""`bench.memory_serve`'s heap snapshots and censuses, and `bench.memory_report`'s reading of them."""

from __future__ import annotations

import gc
import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic_ai.conversation import Conversation

from bench.memory_report import census_lines, owner, package_of, report, taken_numbers, type_growth
from bench.memory_serve import caches, count_types, malloc_info, pymalloc_info, register_stores, take
from store import SqlConversationStore

from .store_conformance import user


class Retained:
    """What the test keeps alive between two snapshots, to be found in the report."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload


@pytest.fixture
def tracing() -> Iterator[None]:
    # Frozen as the server freezes its start-up heap: the census counts what came after, quickly.
    gc.freeze()
    tracemalloc.start(8)
    try:
        yield
    finally:
        tracemalloc.stop()
        gc.unfreeze()


def test_packages_are_named_by_where_their_file_lives() -> None:
    site = "/x/.venv/lib/python3.11/site-packages"
    assert package_of(f"{site}/pydantic_ai/conversation_store.py") == "pydantic_ai"
    assert package_of(f"{site}/typing_extensions.py") == "typing_extensions"
    assert package_of("/usr/lib/python3.11/asyncio/events.py") == "asyncio"
    assert package_of("/work/main/store/conversations.py") == "store"
    frames = [
        ("/work/main/web/api.py", 10),
        ("/work/main/store/codec.py", 97),
        (f"{site}/pydantic/main.py", 3),
    ]
    assert owner(frames) == "store/codec.py:97"
    assert owner([(f"{site}/pydantic/main.py", 3)]) == "-"


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


def test_the_report_finds_what_was_retained_between_two_snapshots(tmp_path: Path, tracing: None) -> None:
    take(tmp_path, 1)
    kept = [Retained(bytes(1000 + n)) for n in range(2000)]
    take(tmp_path, 2)

    assert taken_numbers(tmp_path) == [1, 2]
    taken = json.loads((tmp_path / "taken-2.json").read_text())
    assert taken["traced"] > 0
    assert taken["rss_kb"] > 0
    text = report(tmp_path, top=50)
    assert "| 2 |" in text
    # ~2 MB of payloads, allocated on the line above, and 2,000 more live objects of the class.
    growth = next(line for line in text.splitlines() if line.endswith(" test_bench_memory.py"))
    assert float(growth.split()[0]) > 1900
    assert f"+{len(kept)}" in next(line for line in text.splitlines() if line.endswith(".Retained"))


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

    lines = census_lines(tmp_path, ["0.0", "2.0", "10.1"])

    table = [line for line in lines if line.startswith("|")]
    assert table[0].startswith("| minute | RSS | gc objects |")
    assert [row.split(" | ")[0] for row in table[2:]] == ["| 0.0", "| 2.0", "| 10.1"]
    assert f"{__name__}.Retained +{len(kept)} " in lines[-1]
