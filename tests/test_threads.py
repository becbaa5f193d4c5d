"""Threads: a thread with no title is named after its first message."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store import Conflict, Database, NewRun
from store.threads import TITLE_LENGTH, title_from

pytestmark = pytest.mark.anyio


async def test_a_thread_without_a_title_is_named_after_its_first_message(database_url: str) -> None:
    db = await Database.connect(database_url)
    try:
        untitled = await db.threads.create(user_id="ann")
        titled = await db.threads.create(user_id="ann", title="Billing")
        first = (
            "I was charged twice for ORD-5678,\n  can you refund the second charge please? It was on my card"
        )
        for thread in (untitled, titled):
            run = (await db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content=first))).run
            assert await db.runs.start_reserving(run.run_id, events=1) is not None
            await db.runs.finish(run.run_id, "completed")
            await db.runs.queue(
                NewRun(thread_id=thread.thread_id, kind="message", content="And another thing")
            )

        assert (await db.threads.get(untitled.thread_id)).title == (
            "I was charged twice for ORD-5678, can you refund the second…"
        )
        assert (await db.threads.get(titled.thread_id)).title == "Billing"
    finally:
        await db.aclose()


async def test_a_thread_is_stored_as_created_and_its_id_is_taken_once(database_url: str) -> None:
    db = await Database.connect(database_url)
    try:
        made = await db.threads.create(user_id="ann", title="Billing", thread_id="t-1")
        assert await db.threads.get("t-1", user_id="ann") == made
        with pytest.raises(Conflict, match="'t-1' exists already"):
            await db.threads.create(user_id="bob", title="Mine now", thread_id="t-1")
        assert await db.threads.get("t-1") == made
        # The connection is usable after the refused insert (rolled back, nothing left open).
        other = await db.threads.create(user_id="bob", title="Other")
        assert await db.threads.get(other.thread_id, user_id="bob") == other
    finally:
        await db.aclose()


@pytest.mark.parametrize(
    ("content", "title"),
    [
        ("Where is ORD-5678?", "Where is ORD-5678?"),
        ("  two\n\nlines\tand tabs ", "two lines and tabs"),
        ("x" * 100, "x" * (TITLE_LENGTH - 1) + "…"),
        ("", ""),
    ],
)
def test_title_from(content: str, title: str) -> None:
    assert title_from(content) == title


@given(st.text())
def test_a_title_is_one_short_line_from_the_start_of_the_message(content: str) -> None:
    title = title_from(content)
    words = " ".join(content.split())
    assert len(title) <= TITLE_LENGTH
    assert title == title.strip()
    assert not any(character.isspace() and character != " " for character in title)
    if len(words) <= TITLE_LENGTH:
        assert title == words
    else:
        assert title.endswith("…")
        assert words.startswith(title.removesuffix("…"))
