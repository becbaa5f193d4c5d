"""A turn's own work does not grow with the thread's history: none of our functions is called once
per stored message (`docs/benchmarks.md`, "Flat in history").

pydantic-ai walks the history several times per model request, and so does a server storing
nothing; what ours adds (the load, the checkpoints, the request hooks) must not. Counted in Python
calls of our packages on the loop's thread (`sys.setprofile`), not in time: the same turn on a
short and on a long thread.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import pytest

from agent import RuntimeOptions, run_step
from store import NewRun, Thread

from .core_app import CoreFactory
from .scripted import Calls, Script
from .step_app import App

pytestmark = pytest.mark.anyio

_ROOT = Path(__file__).resolve().parent.parent
_OURS = tuple(f"{_ROOT / package}/" for package in ("agent", "store", "stream", "worker"))
SHORT, LONG = 5, 45
"""Turns of the two threads before the measured one (4 messages each)."""


def _turn() -> list[Calls | str]:
    return [Calls([("lookup", {"key": "ORD-1"})]), "ORD-1 has shipped."]


@contextmanager
def _our_calls() -> Iterator[Counter[str]]:
    """Python calls into our packages on this thread inside the block, by function."""
    counted: Counter[str] = Counter()

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(_OURS):
            code = frame.f_code
            counted[f"{Path(code.co_filename).relative_to(_ROOT)}:{code.co_qualname}"] += 1

    sys.setprofile(profile)
    try:
        yield counted
    finally:
        sys.setprofile(None)


async def _grown(app: App, turns: int) -> Thread:
    thread = await app.thread()
    for number in range(turns):
        await app.send(thread, f"Where is ORD-{number}?")
    assert len(await app.messages(thread)) == 4 * turns
    return thread


async def _counted_turn(app: App, thread: Thread) -> Counter[str]:
    opened = await app.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="And ORD-1?"))
    with _our_calls() as counted:
        status = await run_step(app.runtime, opened.run.run_id)
    assert status == "completed"
    return counted


async def test_a_turn_calls_our_code_as_often_on_a_long_thread_as_on_a_short_one(
    core_factory: CoreFactory,
) -> None:
    # No rate limit: the threads are played faster than a user types.
    app = await core_factory(
        Script(_turn() * (SHORT + LONG + 2)), options=RuntimeOptions(messages_per_minute=None)
    )
    short, long = await _grown(app, SHORT), await _grown(app, LONG)
    # Both histories are cached, as a worker continuing the conversations it served holds them.
    at_short = await _counted_turn(app, short)
    at_long = await _counted_turn(app, long)
    grown = {
        name: (at_short[name], count)
        for name, count in at_long.items()
        if count - at_short[name] >= 4 * (LONG - SHORT) // 2
    }
    assert grown == {}, f"called once per message or more: {grown}"
