"""A finished run's text deltas leave the event log past the replay window; every other event stays."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelRequest

from store import Checkpoint, Database, NewEvent, NewRun, Run
from store.schema import now_utc
from web import Settings, SettingsError

from .store_workers import OpenWorker

pytestmark = pytest.mark.anyio

_TYPES = ["run_started", "text_delta", "text_delta", "text_delta", "text_done", "run_finished"]


async def _run(db: Database, thread_id: str, *, finish: bool) -> tuple[Run, int]:
    """A run of the thread that stored one event of each of `_TYPES`, finished or still running."""
    queued = (await db.runs.queue(NewRun(thread_id=thread_id, kind="message", content="hello"))).run
    started = await db.runs.start_reserving(queued.run_id, events=len(_TYPES))
    assert started is not None
    run, _, first = started
    events = [
        (first + n, NewEvent(run.run_id, kind, json.dumps({"n": n}).encode()))
        for n, kind in enumerate(_TYPES)
    ]
    conversation = await db.conversations.load(thread_id) or Conversation(conversation_id=thread_id)
    conversation.messages = [*conversation.messages, ModelRequest.user_text_prompt("hello")]
    checkpoint = Checkpoint(
        run=run, event_id=first + len(_TYPES) - 1, events=events, finish="completed" if finish else None
    )
    await db.conversations.save_with(conversation, checkpoint=checkpoint)
    return run, first


async def _types(db: Database, thread_id: str) -> list[tuple[int, str]]:
    return [(event.event_id, event.type) for event in await db.events.read(thread_id)]


async def test_a_finished_runs_deltas_go_past_the_window_and_nothing_else(open_worker: OpenWorker) -> None:
    db = await open_worker("w1")
    thread = await db.threads.create(user_id="alice", title="t")
    _, first = await _run(db, thread.thread_id, finish=True)
    other = await db.threads.create(user_id="alice", title="t")
    await _run(db, other.thread_id, finish=False)

    # Finished after the cutoff: kept, as the running run's are.
    assert await db.events.compact(now_utc() - timedelta(hours=1)) == (0, 0)
    assert await db.events.compact(now_utc() + timedelta(seconds=1)) == (1, 3)

    assert await _types(db, thread.thread_id) == [
        (first, "run_started"),
        (first + 4, "text_done"),
        (first + 5, "run_finished"),
    ]
    assert [kind for _, kind in await _types(db, other.thread_id)] == _TYPES
    # A run is compacted once: the next sweep finds nothing to do.
    assert await db.events.compact(now_utc() + timedelta(seconds=1)) == (0, 0)


async def test_a_replay_from_inside_a_compacted_run_gets_its_whole_parts_and_its_end(
    open_worker: OpenWorker,
) -> None:
    db = await open_worker("w1")
    thread = await db.threads.create(user_id="alice", title="t")
    _, first = await _run(db, thread.thread_id, finish=True)
    await db.events.compact(now_utc() + timedelta(seconds=1))

    # A client that saw the first delta resumes after it: the part's text_done, then the run's end.
    after = [
        (event.event_id, event.type) for event in await db.events.read(thread.thread_id, after=first + 1)
    ]
    assert after == [(first + 4, "text_done"), (first + 5, "run_finished")]


def test_the_replay_window_is_an_hour_by_default_and_configurable(tmp_path: Path) -> None:
    assert Settings.load(secret="s", data_dir=tmp_path, environ={}).event_replay_seconds == 3600
    environ = {"DURABLE_CHAT_EVENT_REPLAY_SECONDS": "0"}
    assert Settings.load(secret="s", data_dir=tmp_path, environ=environ).event_replay_seconds == 0
    with pytest.raises(SettingsError) as raised:
        Settings.load(secret="s", data_dir=tmp_path, environ={"DURABLE_CHAT_EVENT_REPLAY_SECONDS": "-5"})
    assert str(raised.value) == "DURABLE_CHAT_EVENT_REPLAY_SECONDS must be a non-negative number, not '-5'"
